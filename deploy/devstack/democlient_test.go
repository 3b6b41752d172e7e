package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acme/platform/deploy/internal/svcproc"
	"github.com/acme/platform/pkg/testkit/mongotest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// The demo service client is created once per data folder, with the
// account binary, and its credentials are kept there: every later start
// prints the same ones without creating another client.
func TestDemoClientIsCreatedOnceAndKept(t *testing.T) {
	account, env, accountCmd := demoAccountBinary(t)
	dataDir := t.TempDir()

	var out bytes.Buffer
	first, err := ensureDemoClient(t.Context(), dataDir, account, env, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first.ID, "cli_") || !strings.HasPrefix(first.Secret, "cs_") || !strings.Contains(out.String(), first.ID) {
		t.Fatalf("first start: client %+v, output %q", first, out.String())
	}
	info, err := os.Stat(filepath.Join(dataDir, demoClientFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v, %v; want it readable by its owner only", info, err)
	}
	// The file is what the README sources: shell variables.
	sourced, err := exec.Command("sh", "-c", `. "$1" && printf '%s:%s' "$CLIENT_ID" "$CLIENT_SECRET"`, "sh", filepath.Join(dataDir, demoClientFile)).Output()
	if err != nil || string(sourced) != first.ID+":"+first.Secret {
		t.Fatalf("sourcing %s gives %q, %v; want %s:%s", demoClientFile, sourced, err, first.ID, first.Secret)
	}

	again, err := ensureDemoClient(t.Context(), dataDir, account, env, &out)
	if err != nil || again != first {
		t.Fatalf("second start: %+v, %v; want the first client %+v", again, err, first)
	}
	list := accountCmd("list-clients", "--account", demoAccount)
	if strings.Count(list, "cli_") != 1 || !strings.Contains(list, first.ID) ||
		!strings.Contains(list, demoClientScopes) {
		t.Fatalf("list-clients after two starts:\n%s\nwant exactly the demo client with its scopes", list)
	}

	// A data folder of a client without today's scopes (no CLIENT_SCOPES,
	// from before webhooks:manage) gets a new client with them.
	old := fmt.Sprintf("CLIENT_ID=%s\nCLIENT_SECRET=%s\n", first.ID, first.Secret)
	if err := os.WriteFile(filepath.Join(dataDir, demoClientFile), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	renewed, err := ensureDemoClient(t.Context(), dataDir, account, env, &out)
	if err != nil || renewed.ID == first.ID || renewed.Scopes != demoClientScopes {
		t.Fatalf("start with an old client: %+v, %v", renewed, err)
	}
}

// The demo app's public client is registered once per data folder and
// address, with the app's redirect and post-logout redirect URIs; the
// app served at another address gets a client of its own.
func TestDemoAppClientIsRegisteredForItsAddress(t *testing.T) {
	account, env, accountCmd := demoAccountBinary(t)
	dataDir := t.TempDir()
	var out bytes.Buffer
	first, err := ensureDemoApp(t.Context(), dataDir, account, "127.0.0.1:8083", env, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first, "cli_") || !strings.Contains(out.String(), first) ||
		!strings.Contains(out.String(), "redirect_uri: http://127.0.0.1:8083/callback\n") ||
		!strings.Contains(out.String(), "post_logout_redirect_uri: http://127.0.0.1:8083/\n") {
		t.Fatalf("first start: client %q, output %q; want the client with the app's redirect URIs", first, out.String())
	}
	again, err := ensureDemoApp(t.Context(), dataDir, account, "127.0.0.1:8083", env, &out)
	if err != nil || again != first {
		t.Fatalf("second start: %q, %v; want the first client %q", again, err, first)
	}
	if list := accountCmd("list-clients", "--account", demoAccount); strings.Count(list, "cli_") != 1 {
		t.Fatalf("list-clients after two starts:\n%s\nwant the demo app alone", list)
	}
	out.Reset()
	moved, err := ensureDemoApp(t.Context(), dataDir, account, "127.0.0.1:18083", env, &out)
	if err != nil || moved == first || !strings.Contains(out.String(), "redirect_uri: http://127.0.0.1:18083/callback\n") {
		t.Fatalf("start at another address: %q, %v, output %q; want a new client for it", moved, err, out.String())
	}
}

// demoAccountBinary builds the account binary and creates the demo
// account on a fresh database, as seedOnce's provisioning does; it
// returns the binary, its environment and a runner of its subcommands.
func demoAccountBinary(t *testing.T) (string, []string, func(args ...string) string) {
	t.Helper()
	bin, err := svcproc.Binaries(t.Context(), t.TempDir(), "account")
	if err != nil {
		t.Fatal(err)
	}
	account := filepath.Join(bin, "account")
	db := mongotest.New(t)
	env := []string{"ACCOUNT_MONGODB_URI=" + mongotest.URI(t), "ACCOUNT_MONGODB_DATABASE=" + db.Name()}
	accountCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), account, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("account %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	accountCmd("create-account", demoAccount)
	return account, env, accountCmd
}
