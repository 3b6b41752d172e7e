package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
)

// metricsAPI is the account service with a login throttle on a fresh
// database, reporting to its own registry.
func metricsAPI(t *testing.T) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	ctx := context.Background()
	store := newStore(t)
	hasher := cheapHasher(t)
	kit := newTokenKit(t, "ES256")
	reg := prometheus.NewRegistry()
	policy := account.ThrottlePolicy{
		User: account.ThrottleLimit{MaxFailures: 2, Window: time.Hour, Lockout: time.Hour, MaxLockout: time.Hour},
	}
	srv := httptest.NewServer(accounthttp.NewHandler(kit.withAuthz(store, accounthttp.Deps{
		Metrics:     reg,
		Sessions:    kit.sessions(store, hasher, &account.LoginThrottle{Store: store, Policy: policy}),
		Definitions: store,
		Verifier:    kit.verifier,
		Keys:        kit.keys,
		IssuerURL:   issuerURL,
	})))
	t.Cleanup(srv.Close)
	acc, err := store.CreateAccount(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	addUser(t, store, hasher, acc.ID, "alice", "alice-password")
	return srv, reg
}

func postJSON(t *testing.T, srv *httptest.Server, path, body string) (int, []byte) {
	t.Helper()
	return post(t, srv, path, "application/json", body)
}

func post(t *testing.T, srv *httptest.Server, path, contentType, body string) (int, []byte) {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+path, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// Every answer of /login and /token/refresh counts once, under the
// outcome its status means; outcomes that did not happen are exported as 0.
func TestLoginAndRefreshOutcomesAreCounted(t *testing.T) {
	t.Parallel()
	srv, reg := metricsAPI(t)
	login := func(pw string) (int, []byte) { return postJSON(t, srv, "/login", loginBody("acme", "alice", pw)) }

	status, body := login("alice-password")
	if status != http.StatusOK {
		t.Fatalf("login: %d %s", status, body)
	}
	var set struct {
		Tokens struct {
			RefreshToken string `json:"refresh_token"`
		} `json:"tokens"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		t.Fatal(err)
	}
	failed := failUntilLocked(t, "login", http.StatusUnauthorized, func() (int, []byte) { return login("wrong") })
	if status, body := postJSON(t, srv, "/login", `{"username":"alice"}`); status != http.StatusBadRequest {
		t.Fatalf("login without password: %d %s", status, body)
	}

	for _, tc := range []struct {
		body string
		want int
	}{
		{refreshBody(set.Tokens.RefreshToken), http.StatusOK},
		{refreshBody(set.Tokens.RefreshToken), http.StatusUnauthorized}, // reused
		{refreshBody("not-a-token"), http.StatusUnauthorized},
		{`{}`, http.StatusBadRequest},
	} {
		if status, body := postJSON(t, srv, "/token/refresh", tc.body); status != tc.want {
			t.Fatalf("refresh %s: %d %s, want %d", tc.body, status, body, tc.want)
		}
	}

	want := authCounters(
		map[string]int{"invalid_credentials": failed, "invalid_request": 1, "success": 1, "throttled": 1},
		map[string]int{"invalid_request": 1, "rejected": 2, "success": 1})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "account_login_attempts_total", "account_token_refreshes_total"); err != nil {
		t.Error(err)
	}
}

// failUntilLocked makes wrong attempts, answered refused, until the
// throttle locks (429), and returns how many were refused.
func failUntilLocked(t *testing.T, what string, refused int, attempt func() (int, []byte)) int {
	t.Helper()
	failed := 0
	status, body := attempt()
	for ; status == refused; status, body = attempt() {
		if failed++; failed > 10 {
			t.Fatalf("no lock after 10 failed %ss", what)
		}
	}
	if status != http.StatusTooManyRequests {
		t.Fatalf("%s after %d failures: %d %s", what, failed, status, body)
	}
	return failed
}

// authCounters is the exposition of the login and refresh counters with
// the counts given by outcome, every other outcome at 0.
func authCounters(logins, refreshes map[string]int) string {
	var b strings.Builder
	for _, c := range []struct {
		name, help string
		outcomes   []string
		counts     map[string]int
	}{
		{"account_login_attempts_total",
			"POST /login requests and password grants of POST /oauth2/token by outcome: success, invalid_credentials, mfa_required (401 asking for a code), throttled (429), unavailable (503), invalid_request, error.",
			[]string{"error", "invalid_credentials", "invalid_request", "mfa_required", "success", "throttled", "unavailable"}, logins},
		{"account_token_refreshes_total",
			"POST /token/refresh requests and refresh_token grants of POST /oauth2/token by outcome: success, rejected (401; invalid_grant on the token endpoint), unavailable (503), invalid_request, error.",
			[]string{"error", "invalid_request", "rejected", "success", "unavailable"}, refreshes},
	} {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", c.name, c.help, c.name)
		for _, o := range c.outcomes {
			fmt.Fprintf(&b, "%s{outcome=%q} %d\n", c.name, o, c.counts[o])
		}
	}
	return b.String()
}

// The password and refresh_token grants of the token endpoint count as
// logins and refreshes, under the outcome their answer means (a refused
// credential is invalid_grant there); client credentials count as
// neither.
func TestTokenEndpointGrantsAreCountedAsLoginsAndRefreshes(t *testing.T) {
	t.Parallel()
	srv, reg := metricsAPI(t)
	grant := func(form url.Values) (int, []byte) {
		t.Helper()
		return post(t, srv, "/oauth2/token", "application/x-www-form-urlencoded", form.Encode())
	}
	password := func(pw string) (int, []byte) {
		return grant(url.Values{"grant_type": {"password"}, "account_name": {"acme"}, "username": {"alice"}, "password": {pw}})
	}
	status, body := password("alice-password")
	if status != http.StatusOK {
		t.Fatalf("password grant: %d %s", status, body)
	}
	var set struct {
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(body, &set); err != nil || set.RefreshToken == "" {
		t.Fatalf("password grant: %s (%v)", body, err)
	}
	failed := failUntilLocked(t, "password grant", http.StatusBadRequest, func() (int, []byte) { return password("wrong") })
	if status, body := grant(url.Values{"grant_type": {"password"}, "account_name": {"acme"}, "username": {"alice"}}); status != http.StatusBadRequest {
		t.Fatalf("password grant without password: %d %s", status, body)
	}
	for _, tc := range []struct {
		form url.Values
		want int
	}{
		{url.Values{"grant_type": {"refresh_token"}, "refresh_token": {set.RefreshToken}}, http.StatusOK},
		{url.Values{"grant_type": {"refresh_token"}, "refresh_token": {set.RefreshToken + "x"}}, http.StatusBadRequest},
		{url.Values{"grant_type": {"refresh_token"}}, http.StatusBadRequest},
		{url.Values{"grant_type": {"client_credentials"}}, http.StatusUnauthorized},
		{url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}}, http.StatusBadRequest},
	} {
		if status, body := grant(tc.form); status != tc.want {
			t.Fatalf("grant %v: %d %s, want %d", tc.form, status, body, tc.want)
		}
	}
	want := authCounters(
		map[string]int{"invalid_credentials": failed, "invalid_request": 1, "success": 1, "throttled": 1},
		map[string]int{"invalid_request": 1, "rejected": 1, "success": 1})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "account_login_attempts_total", "account_token_refreshes_total"); err != nil {
		t.Error(err)
	}
}

// Handlers of one process may share a registry: they count into the same
// series.
func TestHandlersShareTheirRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	for range 2 {
		srv := httptest.NewServer(accounthttp.NewHandler(accounthttp.Deps{Metrics: reg}))
		t.Cleanup(srv.Close)
		if status, body := postJSON(t, srv, "/login", `{}`); status != http.StatusBadRequest {
			t.Fatalf("login without fields: %d %s", status, body)
		}
	}
	const want = `
# HELP account_login_attempts_total POST /login requests and password grants of POST /oauth2/token by outcome: success, invalid_credentials, mfa_required (401 asking for a code), throttled (429), unavailable (503), invalid_request, error.
# TYPE account_login_attempts_total counter
account_login_attempts_total{outcome="error"} 0
account_login_attempts_total{outcome="invalid_credentials"} 0
account_login_attempts_total{outcome="invalid_request"} 2
account_login_attempts_total{outcome="mfa_required"} 0
account_login_attempts_total{outcome="success"} 0
account_login_attempts_total{outcome="throttled"} 0
account_login_attempts_total{outcome="unavailable"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "account_login_attempts_total"); err != nil {
		t.Error(err)
	}
}
