package svcproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Build builds the named service binaries (account, conversations: the
// package github.com/acme/platform/services/<name>/cmd/<name>) into dir as
// "make build" does (static, without cgo, -trimpath), so that every
// harness that builds them this way shares the compiled packages in Go's
// build cache.
func Build(ctx context.Context, dir string, services ...string) error {
	for _, svc := range services {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, svc),
			"github.com/acme/platform/services/"+svc+"/cmd/"+svc)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", svc, err, out)
		}
	}
	return nil
}
