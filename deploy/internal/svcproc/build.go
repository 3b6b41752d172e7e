package svcproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// EnvBinaries names a folder of prebuilt service binaries. "make test"
// builds both services into one before the tests, so that the test binaries
// that run them (deploy/e2e, deploy/bench, deploy/observabilitytest) do not
// each compile them, at the same time, on a cold build cache.
const EnvBinaries = "SERVICE_BINARIES"

// Binaries returns the folder holding the named service binaries (account,
// conversations): $SERVICE_BINARIES when it is set, else dir, after
// building them into it as "make build" does (static, without cgo,
// -trimpath), so that every caller shares the compiled packages in Go's
// build cache.
func Binaries(ctx context.Context, dir string, services ...string) (string, error) {
	if prebuilt := os.Getenv(EnvBinaries); prebuilt != "" {
		for _, svc := range services {
			if _, err := os.Stat(filepath.Join(prebuilt, svc)); err != nil {
				return "", fmt.Errorf("$%s: %w", EnvBinaries, err)
			}
		}
		return prebuilt, nil
	}
	for _, svc := range services {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, svc),
			"github.com/acme/platform/services/"+svc+"/cmd/"+svc)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %w\n%s", svc, err, out)
		}
	}
	return dir, nil
}
