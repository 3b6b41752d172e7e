package mongoproc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/acme/platform/pkg/testkit/internal/procfile"
)

// EnvBinary names the environment variable that points at a prebuilt
// embeddedmongo command (go build ./pkg/testkit/cmd/embeddedmongo), used
// instead of building one.
const EnvBinary = "EMBEDDEDMONGO_BIN"

// CommandPackage is the import path of the embeddedmongo command.
const CommandPackage = "github.com/acme/platform/pkg/testkit/cmd/embeddedmongo"

// binary is the embeddedmongo command this process runs.
type binary struct {
	path string
	// srcDir is the command's source folder, where go build runs; empty
	// for a prebuilt binary ($EMBEDDEDMONGO_BIN).
	srcDir string
}

var (
	binMu    sync.Mutex
	binFound *binary // set by the first successful locate
	binBuilt bool    // set once go build has run in this process
)

// locate returns the command to run: $EMBEDDEDMONGO_BIN, or else where
// build puts it, in the user's cache folder keyed by the source folder of
// the command (so checkouts side by side do not share a binary).
func locate(ctx context.Context) (binary, error) {
	binMu.Lock()
	defer binMu.Unlock()
	if binFound != nil {
		return *binFound, nil
	}
	var b binary
	if p := os.Getenv(EnvBinary); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return binary{}, fmt.Errorf("$%s: %w", EnvBinary, err)
		}
		if _, err := os.Stat(abs); err != nil {
			return binary{}, fmt.Errorf("$%s: %w", EnvBinary, err)
		}
		b = binary{path: abs}
	} else {
		// go list finds the source through this module's go.mod or the
		// workspace, as the test build did.
		out, err := exec.CommandContext(ctx, "go", "list", "-find", "-f", "{{.Dir}}", CommandPackage).Output()
		if err != nil {
			return binary{}, fmt.Errorf("finding the source of %s (or set $%s to a built one): %w%s", CommandPackage, EnvBinary, err, stderrOf(err))
		}
		src := strings.TrimSpace(string(out))
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		b = binary{path: filepath.Join(cache, "embeddedmongo", hash(src), "embeddedmongo"), srcDir: src}
	}
	binFound = &b
	return b, nil
}

// build runs go build for b, once per process, unless b is prebuilt; go
// build leaves an up-to-date binary alone. It builds without -race and
// with the caller's GOFLAGS (make's -trimpath), as "make run" builds the
// dev stack and as "make test" vets and tests the embedded store's own
// packages: all share one compilation of FerretDB and SQLite, by far the
// longest of the workspace.
func build(ctx context.Context, b binary) error {
	binMu.Lock()
	defer binMu.Unlock()
	if b.srcDir == "" || binBuilt {
		return nil
	}
	dir := filepath.Dir(b.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	// Test binaries of one run, and runs side by side, build to the same
	// path: one at a time.
	unlock, err := procfile.Lock(ctx, filepath.Join(dir, "build.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", b.path, ".")
	cmd.Dir = b.srcDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", CommandPackage, err, out)
	}
	binBuilt = true
	return nil
}

// hash returns a short hash of s, for folder names.
func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// stderrOf returns the standard error an *exec.ExitError captured, if any.
func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return "\n" + string(bytes.TrimSpace(ee.Stderr))
	}
	return ""
}
