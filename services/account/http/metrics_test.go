package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
	"github.com/acme/platform/services/account/mongo"
)

// metricsAPI is the account service with a login throttle on a fresh
// database, reporting to its own registry.
func metricsAPI(t *testing.T) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	ctx := context.Background()
	store := mongo.New(mongotest.New(t))
	if err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	hasher := cheapHasher(t)
	kit := newTokenKit(t, "ES256")
	reg := prometheus.NewRegistry()
	policy := account.ThrottlePolicy{
		User: account.ThrottleLimit{MaxFailures: 2, Window: time.Hour, Lockout: time.Hour, MaxLockout: time.Hour},
	}
	srv := httptest.NewServer(accounthttp.NewHandler(accounthttp.Deps{
		Metrics:     reg,
		Sessions:    kit.sessions(store, hasher, &account.LoginThrottle{Store: store, Policy: policy}),
		Definitions: store,
		Verifier:    kit.verifier,
		Keys:        kit.keys,
		IssuerURL:   issuerURL,
	}))
	t.Cleanup(srv.Close)
	acc, err := store.CreateAccount(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	hash, err := hasher.Hash(ctx, "alice-password")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateUser(ctx, acc.ID, "alice", hash); err != nil {
		t.Fatal(err)
	}
	return srv, reg
}

func postJSON(t *testing.T, srv *httptest.Server, path, body string) (int, []byte) {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+path, "application/json", strings.NewReader(body))
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
	// Wrong passwords until the throttle locks the user.
	failed := 0
	for status, body = login("wrong"); status == http.StatusUnauthorized; status, body = login("wrong") {
		if failed++; failed > 10 {
			t.Fatal("no lock after 10 failed logins")
		}
	}
	if status != http.StatusTooManyRequests {
		t.Fatalf("login after %d failures: %d %s", failed, status, body)
	}
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

	want := fmt.Sprintf(`
# HELP account_login_attempts_total POST /login requests by outcome: success, invalid_credentials, throttled (429), unavailable (503), invalid_request, error.
# TYPE account_login_attempts_total counter
account_login_attempts_total{outcome="error"} 0
account_login_attempts_total{outcome="invalid_credentials"} %d
account_login_attempts_total{outcome="invalid_request"} 1
account_login_attempts_total{outcome="success"} 1
account_login_attempts_total{outcome="throttled"} 1
account_login_attempts_total{outcome="unavailable"} 0
# HELP account_token_refreshes_total POST /token/refresh requests by outcome: success, rejected (401), unavailable (503), invalid_request, error.
# TYPE account_token_refreshes_total counter
account_token_refreshes_total{outcome="error"} 0
account_token_refreshes_total{outcome="invalid_request"} 1
account_token_refreshes_total{outcome="rejected"} 2
account_token_refreshes_total{outcome="success"} 1
account_token_refreshes_total{outcome="unavailable"} 0
`, failed)
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
# HELP account_login_attempts_total POST /login requests by outcome: success, invalid_credentials, throttled (429), unavailable (503), invalid_request, error.
# TYPE account_login_attempts_total counter
account_login_attempts_total{outcome="error"} 0
account_login_attempts_total{outcome="invalid_credentials"} 0
account_login_attempts_total{outcome="invalid_request"} 2
account_login_attempts_total{outcome="success"} 0
account_login_attempts_total{outcome="throttled"} 0
account_login_attempts_total{outcome="unavailable"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "account_login_attempts_total"); err != nil {
		t.Error(err)
	}
}
