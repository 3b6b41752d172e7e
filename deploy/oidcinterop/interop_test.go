package oidcinterop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/deploy/internal/npmcache"
	"github.com/acme/platform/deploy/internal/svcproc"
	"github.com/acme/platform/pkg/testkit/mongotest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// audience is the platform audience both services are configured with.
const audience = "acme-platform"

func TestOpenIDClient(t *testing.T) {
	for _, tl := range []struct{ program, install string }{
		{"node", "apt-get install nodejs (Node 20 or later)"},
		{"npm", "apt-get install npm"},
		{chromium(), "apt-get install chromium (or CHROMIUM_PATH naming a Chromium)"},
	} {
		if _, err := exec.LookPath(tl.program); err != nil {
			t.Fatalf("%s not found: %s", tl.program, tl.install)
		}
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// npm ci installs while the services start.
	// npm ci and the suite end with the test's own -timeout (shortly
	// before, to report what they were doing): npm may fetch the locked
	// packages from the registry, and a loaded machine runs both slowly.
	ctx := t.Context()
	if end, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end.Add(-30*time.Second))
		defer cancel()
	}
	installed := make(chan error, 1)
	go func() {
		installed <- npmcache.Install(ctx, dir, func(ctx context.Context, dir string, args ...string) error {
			return run(ctx, t, dir, nil, args...)
		})
	}()
	env := startAndSeed(t)
	browser, _ := exec.LookPath(chromium())
	env = append(env, "CHROMIUM_PATH="+browser)
	if err := <-installed; err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, t, dir, env, "node", "--test", "--test-reporter=spec"); err != nil {
		t.Fatal(err)
	}
}

// run runs a command in dir with env added, logging its output.
func run(ctx context.Context, t *testing.T, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// startAndSeed starts both services on fresh databases (the test's
// cleanup stops them), creates the account, its user and its two clients
// with the account binary's subcommands, and returns the suite's
// environment (see the package documentation).
func startAndSeed(t *testing.T) []string {
	t.Helper()
	bin, err := svcproc.Binaries(t.Context(), t.TempDir(), "account", "conversations")
	if err != nil {
		t.Fatal(err)
	}
	// The demo app listens first: both services allow its origin.
	app := newDemoApp(t)
	cors := "_CORS_ORIGINS=" + app.origin
	pair := svcproc.StartPairForTest(t, bin, mongotest.URI(t), mongotest.New(t).Name(), mongotest.New(t).Name(),
		[]string{"ACCOUNT_AUDIENCE=" + audience, "ACCOUNT" + cors}, []string{"CONVERSATIONS_AUDIENCE=" + audience, "CONVERSATIONS" + cors})
	const accountName, username = "interop", "alice"
	password := randomSecret(t)
	pair.Account(t, "", "create-account", accountName)
	pair.Account(t, password+"\n", "create-user", "--account", accountName, "--username", username)
	// A second user, who enrols a second factor in the browser suite.
	const mfaUsername = "carol"
	mfaPassword := randomSecret(t)
	pair.Account(t, mfaPassword+"\n", "create-user", "--account", accountName, "--username", mfaUsername)
	// The password grant is the operator's choice per client: these two
	// have it, the apps below do not.
	confidential := pair.Account(t, "", "create-client", "--account", accountName, "--name", "backend",
		"--scopes", "definitions:read,definitions:write,conversations:read,conversations:write", "--allow-password-grant")
	public := pair.Account(t, "", "create-client", "--account", accountName, "--name", "spa", "--public", "--allow-password-grant")
	// The demo app, and a web app whose redirect URIs land on plain pages
	// of the demo app's server.
	demo := pair.Account(t, "", "create-client", "--account", accountName, "--name", "demo-app", "--public",
		"--redirect-uri", app.origin+"/callback", "--post-logout-redirect-uri", app.origin+"/")
	web := pair.Account(t, "", "create-client", "--account", accountName, "--name", "web-app", "--public",
		"--redirect-uri", app.origin+appRedirectPath, "--post-logout-redirect-uri", app.origin+appPostLogoutPath)
	demoID, webID := clientIDPattern.FindStringSubmatch(demo), clientIDPattern.FindStringSubmatch(web)
	if demoID == nil || webID == nil {
		t.Fatalf("create-client --public --redirect-uri printed no client_id:\n%s\n%s", demo, web)
	}
	app.serve(t, pair.AccountURL, pair.ConversationsURL, demoID[1], accountName)
	id, secret := clientIDPattern.FindStringSubmatch(confidential), clientSecretPattern.FindStringSubmatch(confidential)
	publicID := clientIDPattern.FindStringSubmatch(public)
	if id == nil || secret == nil || publicID == nil || clientSecretPattern.MatchString(public) {
		// The confidential client's output is not shown: it holds a secret.
		t.Fatalf("create-client printed no client_id and client_secret (%d bytes), or create-client --public a secret:\n%s", len(confidential), public)
	}
	return []string{
		"OIDC_TEST_ISSUER=" + pair.AccountURL,
		"OIDC_TEST_AUDIENCE=" + audience,
		"OIDC_TEST_CONVERSATIONS_URL=" + pair.ConversationsURL,
		"OIDC_TEST_ACCOUNT_NAME=" + accountName,
		"OIDC_TEST_USERNAME=" + username,
		"OIDC_TEST_PASSWORD=" + password,
		"OIDC_TEST_MFA_USERNAME=" + mfaUsername,
		"OIDC_TEST_MFA_PASSWORD=" + mfaPassword,
		"OIDC_TEST_CLIENT_ID=" + id[1],
		"OIDC_TEST_CLIENT_SECRET=" + secret[1],
		"OIDC_TEST_PUBLIC_CLIENT_ID=" + publicID[1],
		"OIDC_TEST_APP_CLIENT_ID=" + webID[1],
		"OIDC_TEST_APP_REDIRECT_URI=" + app.origin + appRedirectPath,
		"OIDC_TEST_APP_POST_LOGOUT_URI=" + app.origin + appPostLogoutPath,
		"OIDC_TEST_DEMO_APP_URL=" + app.origin,
	}
}

var (
	clientIDPattern     = regexp.MustCompile(`(?m)^client_id: (\S+)$`)
	clientSecretPattern = regexp.MustCompile(`(?m)^client_secret: (cs_\S+)$`)
)

// randomSecret is a password of 128 random bits.
func randomSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "pw-" + hex.EncodeToString(b)
}
