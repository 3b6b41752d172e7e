package svcproc

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// StartForTest runs a service binary until the test ends, then stops it
// with SIGTERM and requires a clean exit. When the test failed, it shows
// what the service logged above info level (the causes of 5xx answers).
// It waits for readiness and the stop as long as a loaded machine takes,
// within generous bounds that only a hang reaches.
func StartForTest(t testing.TB, bin string, env []string, opsAddr string) *Process {
	t.Helper()
	p, err := Start(context.Background(), bin, env, opsAddr, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(20 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			var lines []string
			for line := range strings.Lines(p.Logs.String()) {
				if !strings.Contains(line, `"level":"INFO"`) && !strings.Contains(line, `"level":"DEBUG"`) {
					lines = append(lines, line)
				}
			}
			t.Logf("%s logged:\n%s", filepath.Base(bin), strings.Join(lines, ""))
		}
	})
	return p
}

// FreeAddrForTest is FreeAddr that fails the test on error.
func FreeAddrForTest(t testing.TB) string {
	t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
