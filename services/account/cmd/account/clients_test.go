package main

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/services/account"
	"github.com/acme/platform/services/account/mongostore"
)

// credentialsIn picks the client_id and client_secret lines out of a
// command's output, failing the test when either is missing.
func credentialsIn(t *testing.T, out string) (id, secret string) {
	t.Helper()
	idLine := regexp.MustCompile(`(?m)^client_id: (cli_[0-9a-f]+)$`).FindStringSubmatch(out)
	secretLine := regexp.MustCompile(`(?m)^client_secret: (cs_[A-Za-z0-9_-]{43,})$`).FindStringSubmatch(out)
	if idLine == nil || secretLine == nil {
		t.Fatalf("output %q does not print client_id and client_secret", out)
	}
	return idLine[1], secretLine[1]
}

func mustRun(t *testing.T, want string, args ...string) string {
	t.Helper()
	out, err := runCmd(t, "", args...)
	if err != nil || !strings.Contains(out, want) {
		t.Fatalf("%v = %q, %v; want output containing %q", args, out, err, want)
	}
	return out
}

func TestClientCommands(t *testing.T) {
	useDatabase(t)
	t.Setenv("ACCOUNT_CLIENT_SECRET_OVERLAP", "1h")
	// The credentials the commands print are checked the way the token
	// endpoint checks them.
	store := mongostore.New(mongotest.Client(t).Database(os.Getenv("ACCOUNT_MONGODB_DATABASE")))
	auth := account.ClientAuthenticator{Clients: store}
	works := func(what, id, secret string, want bool) {
		t.Helper()
		c, err := auth.Authenticate(context.Background(), id, secret)
		switch {
		case want && (err != nil || c.ID != id):
			t.Fatalf("%s: Authenticate = %+v, %v; want the client", what, c, err)
		case !want && !errors.Is(err, account.ErrInvalidClient):
			t.Fatalf("%s: Authenticate err = %v; want ErrInvalidClient", what, err)
		}
	}

	mustRun(t, "created account acme", "create-account", "acme")
	mustRun(t, "created account other", "create-account", "other")
	out := mustRun(t, "created client billing in account acme with scopes conversations:read definitions:read",
		"create-client", "--account", "Acme", "--name", "billing", "--scopes", "definitions:read,conversations:read")
	id, first := credentialsIn(t, out)
	works("created", id, first, true)
	if c, _ := store.ClientByID(context.Background(), id); c.SecretHash == "" || strings.Contains(c.SecretHash, first) {
		t.Fatalf("stored client %+v: want only a hash of the secret", c)
	}

	for _, bad := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"create-client", "--account", "acme", "--name", "x", "--scopes", "definitions:read,admin"}, `unknown scope "admin"`},
		{[]string{"create-client", "--account", "acme", "--name", "x"}, "usage: account create-client"},
		{[]string{"create-client", "--account", "acme", "--scopes", "definitions:read"}, "usage: account create-client"},
		{[]string{"create-client", "--account", "nope", "--name", "x", "--scopes", "definitions:read"}, "not found"},
		{[]string{"create-client", "--account", "acme", "--name", "x", "--scopes", "definitions:read", "--secret", "s"}, "flag provided but not defined"},
		{[]string{"list-clients"}, "usage: account list-clients"},
		{[]string{"list-clients", "--account", "nope"}, "not found"},
		{[]string{"rotate-client-secret", "--account", "acme"}, "usage: account rotate-client-secret"},
		{[]string{"rotate-client-secret", "--account", "other", "--client", id}, "not found"},
		{[]string{"rotate-client-secret", "--account", "acme", "--client", "cli_nope"}, "not found"},
		{[]string{"rotate-client-secret", "--account", "acme", "--client", id, "--overlap", "-1h"}, "negative"},
		{[]string{"rotate-client-secret", "--account", "acme", "--client", id, "--overlap", "soon"}, "invalid value"},
		{[]string{"disable-client", "--account", "other", "--client", id}, "not found"},
		{[]string{"disable-client", "--account", "acme"}, "usage: account disable-client"},
	} {
		if out, err := runCmd(t, "", bad.args...); err == nil || !strings.Contains(err.Error(), bad.wantErr) {
			t.Errorf("%v = %q, %v; want an error containing %q", bad.args, out, err, bad.wantErr)
		}
	}
	works("after refused commands", id, first, true)
	if list := mustRun(t, "", "list-clients", "--account", "acme"); strings.Count(list, "cli_") != 1 {
		t.Fatalf("refused create-client commands created clients:\n%s", list)
	}

	// Rotation with the configured default overlap: both secrets work.
	out = mustRun(t, "the old secret works until", "rotate-client-secret", "--account", "acme", "--client", id)
	rotatedID, second := credentialsIn(t, out)
	if rotatedID != id || second == first {
		t.Fatalf("rotation printed %s, %s", rotatedID, second)
	}
	works("new secret", id, second, true)
	works("old secret within the overlap", id, first, true)
	list := mustRun(t, "PREVIOUS SECRET VALID UNTIL", "list-clients", "--account", "acme")
	if !regexp.MustCompile(id + `\s+billing\s+conversations:read,definitions:read\s+enabled\s+\S+\s+\d{4}-`).MatchString(list) {
		t.Fatalf("list-clients does not show the client with its overlap:\n%s", list)
	}
	if other := mustRun(t, "CLIENT_ID", "list-clients", "--account", "other"); strings.Contains(other, id) {
		t.Fatalf("list-clients of another account shows %s:\n%s", id, other)
	}

	// Without overlap the replaced secret stops at once.
	out = mustRun(t, "the old secret no longer works", "rotate-client-secret", "--account", "acme", "--client", id, "--overlap", "0")
	_, third := credentialsIn(t, out)
	works("newest secret", id, third, true)
	works("secret replaced without overlap", id, second, false)
	works("first secret", id, first, false)

	mustRun(t, "disabled", "disable-client", "--account", "acme", "--client", id)
	works("disabled client", id, third, false)
	mustRun(t, id+"  billing  conversations:read,definitions:read  disabled", "list-clients", "--account", "acme")
	mustRun(t, "enabled", "enable-client", "--account", "acme", "--client", id)
	works("re-enabled client", id, third, true)

	// A public client: no secret printed, authenticated by its id alone.
	out = mustRun(t, "created public client spa in account acme", "create-client", "--account", "acme", "--name", "spa", "--public")
	m := regexp.MustCompile(`(?m)^client_id: (cli_[0-9a-f]+)$`).FindStringSubmatch(out)
	if m == nil || strings.Contains(out, "client_secret") || strings.Contains(out, "cs_") {
		t.Fatalf("create-client --public printed %q; want a client_id and no secret", out)
	}
	public := m[1]
	works("public client by its id alone", public, "", true)
	works("public client sending a secret", public, third, false)
	works("confidential client without its secret", id, "", false)
	if list := mustRun(t, "", "list-clients", "--account", "acme"); !regexp.MustCompile(public + `\s+spa\s+\(public\)\s+enabled`).MatchString(list) {
		t.Fatalf("list-clients does not show the public client:\n%s", list)
	}
	for _, bad := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"create-client", "--account", "acme", "--name", "x", "--public", "--scopes", "definitions:read"}, "a public client has no scopes"},
		{[]string{"rotate-client-secret", "--account", "acme", "--client", public}, "has no secret"},
	} {
		if out, err := runCmd(t, "", bad.args...); err == nil || !strings.Contains(err.Error(), bad.wantErr) {
			t.Errorf("%v = %q, %v; want an error containing %q", bad.args, out, err, bad.wantErr)
		}
	}
	works("public client after refused commands", public, "", true)
}

func TestHelpListsClientCommands(t *testing.T) {
	out, err := runCmd(t, "", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"create-client", "list-clients", "rotate-client-secret", "disable-client", "enable-client", "ACCOUNT_CLIENT_SECRET_OVERLAP"} {
		if !strings.Contains(out, cmd) {
			t.Errorf("--help does not list %s", cmd)
		}
	}
}

// The registration of an app: redirect URIs and grants at creation, and
// changed for an existing client; refused values change nothing.
func TestClientRegistrationCommands(t *testing.T) {
	useDatabase(t)
	store := mongostore.New(mongotest.Client(t).Database(os.Getenv("ACCOUNT_MONGODB_DATABASE")))
	mustRun(t, "created account acme", "create-account", "acme")
	out := mustRun(t, "grants: authorization_code refresh_token", "create-client", "--account", "acme", "--name", "demo", "--public",
		"--redirect-uri", "http://127.0.0.1:8083/callback", "--redirect-uri", "com.example.app:/cb",
		"--post-logout-redirect-uri", "http://127.0.0.1:8083/")
	m := regexp.MustCompile(`(?m)^client_id: (cli_[0-9a-f]+)$`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "redirect_uri: com.example.app:/cb") {
		t.Fatalf("create-client printed %q", out)
	}
	id := m[1]
	ctx := context.Background()
	c, err := store.ClientByID(ctx, id)
	if err != nil || len(c.RedirectURIs) != 2 || c.AllowsGrant(account.GrantPassword) || c.PostLogoutRedirectURIs[0] != "http://127.0.0.1:8083/" {
		t.Fatalf("stored client %+v, %v", c, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"update-client", "--account", "acme", "--client", id, "--redirect-uri", "http://app.example/cb"}, "loopback"},
		{[]string{"update-client", "--account", "acme", "--client", id, "--redirect-uri", "https://app.example/cb#x"}, "fragment"},
		{[]string{"update-client", "--account", "acme", "--client", id, "--allow-password-grant", "--no-password-grant"}, "exclude"},
		{[]string{"update-client", "--account", "other", "--client", id}, "not found"},
		{[]string{"create-client", "--account", "acme", "--name", "x", "--public", "--redirect-uri", "https://*.example/cb"}, "wildcard"},
	} {
		if out, err := runCmd(t, "", tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v = %q, %v; want an error about %q", tc.args, out, err, tc.want)
		}
	}
	if list := mustRun(t, "GRANTS", "list-clients", "--account", "acme"); !regexp.MustCompile(id + `\s+demo\s+\(public\)\s+enabled\s+\S+\s+-\s+authorization_code,refresh_token\s+http://127.0.0.1:8083/callback com.example.app:/cb`).MatchString(list) {
		t.Fatalf("list-clients does not show the grants and redirect URIs:\n%s", list)
	}
	if after, _ := store.ClientByID(ctx, id); len(after.RedirectURIs) != 2 || after.RedirectURIs[0] != c.RedirectURIs[0] {
		t.Fatalf("refused commands changed the client: %+v", after)
	}
	mustRun(t, "grants: authorization_code password refresh_token", "update-client", "--account", "acme", "--client", id,
		"--redirect-uri", "https://app.example/cb", "--allow-password-grant")
	c, _ = store.ClientByID(ctx, id)
	if len(c.RedirectURIs) != 1 || !c.AllowsGrant(account.GrantPassword) || len(c.PostLogoutRedirectURIs) != 1 {
		t.Fatalf("after update-client: %+v", c)
	}
	mustRun(t, "grants: authorization_code refresh_token", "update-client", "--account", "acme", "--client", id, "--no-password-grant", "--no-post-logout-redirect-uris")
	if c, _ = store.ClientByID(ctx, id); c.AllowsGrant(account.GrantPassword) || len(c.PostLogoutRedirectURIs) != 0 {
		t.Fatalf("after --no-password-grant: %+v", c)
	}
}
