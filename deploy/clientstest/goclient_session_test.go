package clientstest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/pkg/problem"
)

// claims decodes the payload of a fake token.
func claims(t *testing.T, jwt string) map[string]any {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", jwt)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (g *goSuite) testLoginSendsCredentialsAndUsesTheIDToken(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()
	if err := c.Login(ctx); err != nil {
		t.Fatal(err)
	}
	var body map[string]string
	if err := json.Unmarshal([]byte(f.strings(func(f *wire) []string { return f.loginBodies })[0]), &body); err != nil {
		t.Fatal(err)
	}
	if want := (map[string]string{"username": f.username, "password": f.password, "accountName": f.accountName}); !equalMaps(body, want) {
		t.Fatalf("login body = %v, want %v", body, want)
	}
	if _, err := c.ListDefinitions(ctx); err != nil {
		t.Fatal(err)
	}
	tok, err := c.IDToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if claims(t, tok)["token_use"] != "id" {
		t.Fatalf("IDToken returned a %v token", claims(t, tok)["token_use"])
	}
	if auth := f.strings(func(f *wire) []string { return f.auth }); auth[0] != "Bearer "+tok {
		t.Fatalf("Authorization = %q, want the id token", auth[0])
	}
	if logins, _ := f.renewals(); logins != 1 {
		t.Fatalf("%d logins, want 1", logins)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func (g *goSuite) testLoginInvalidCredentials(t *testing.T) {
	f := g.newWire(t)
	c := f.newClient(t, nil, client.Config{
		Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: "wrong-Pa55word"},
	})
	err := c.Login(context.Background())
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("Login: %v (%T), want *client.Error", err, err)
	}
	if e.Status != 401 || e.Code != client.CodeInvalidCredentials || e.Title != "Unauthorized" ||
		e.Type != "urn:problem-type:invalid_credentials" || e.Detail == "" || e.RequestID == "" {
		t.Fatalf("error = %+v", e)
	}
	if !client.IsCode(err, client.CodeInvalidCredentials) || !errors.Is(err, client.ErrInvalidCredentials) ||
		errors.Is(err, client.ErrInvalidToken) || client.IsCode(err, client.CodeInvalidToken) {
		t.Fatal("IsCode or errors.Is disagree with the code")
	}
	msg := err.Error()
	for _, want := range []string{"POST /login", "401", "invalid_credentials", e.RequestID} {
		if !strings.Contains(msg, want) {
			t.Errorf("Error() = %q, want it to name %q", msg, want)
		}
	}
	if strings.Contains(msg, "wrong-Pa55word") {
		t.Errorf("Error() = %q carries the password", msg)
	}

	// A call that needs a token logs in, and fails with the same error.
	if _, err := c.ListDefinitions(context.Background()); !errors.Is(err, client.ErrInvalidCredentials) {
		t.Fatalf("ListDefinitions without a session: %v", err)
	}
	if n := f.count("GET /definitions"); n != 0 {
		t.Fatalf("%d requests to /definitions without a token", n)
	}
}

func (g *goSuite) testFirstCallLogsIn(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	for range 3 {
		if _, err := c.ListDefinitions(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if logins, _ := f.renewals(); logins != 1 {
		t.Fatalf("%d logins for three calls, want 1", logins)
	}
}

func (g *goSuite) testRenewsBeforeExpiry(t *testing.T) {
	for _, tc := range []struct {
		expiresIn int
		margin    time.Duration
	}{
		{3600, 60 * time.Second}, // 60 s
		{300, 30 * time.Second},  // a tenth of the lifetime is smaller
		{10, time.Second},
	} {
		t.Run(time.Duration(tc.expiresIn*int(time.Second)).String(), func(t *testing.T) {
			f := g.newWire(t)
			f.set(func(f *wire) { f.expiresIn = tc.expiresIn; f.refreshMode = refreshNotDeployed })
			clk := newClock()
			c := f.client(t, clk)
			ctx := context.Background()
			if err := c.Login(ctx); err != nil {
				t.Fatal(err)
			}
			first, _ := c.IDToken(ctx)

			clk.Advance(time.Duration(tc.expiresIn)*time.Second - tc.margin - time.Millisecond)
			if _, err := c.ListDefinitions(ctx); err != nil {
				t.Fatal(err)
			}
			if logins, refreshes := f.renewals(); logins != 1 || refreshes != 0 {
				t.Fatalf("renewed %d+%d times before the margin", logins-1, refreshes)
			}

			clk.Advance(time.Millisecond)
			if _, err := c.ListDefinitions(ctx); err != nil {
				t.Fatal(err)
			}
			// The refresh endpoint is not deployed (404): log in again.
			if logins, refreshes := f.renewals(); logins != 2 || refreshes != 1 {
				t.Fatalf("at the margin: %d logins, %d refreshes, want 2 and 1", logins, refreshes)
			}
			if auth := f.strings(func(f *wire) []string { return f.auth }); auth[len(auth)-1] == "Bearer "+first {
				t.Fatal("the call after the renewal still sent the old token")
			}
		})
	}
}

func (g *goSuite) testRenewsOn401AndRetriesOnce(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()
	if err := c.Login(ctx); err != nil {
		t.Fatal(err)
	}
	f.revokeAll() // e.g. the keys were rotated

	if _, err := c.ListDefinitions(ctx); err != nil {
		t.Fatalf("after revocation: %v", err)
	}
	if n := f.count("GET /definitions"); n != 2 {
		t.Fatalf("%d requests, want 2 (rejected, retried)", n)
	}
	if auth := f.strings(func(f *wire) []string { return f.auth }); auth[0] == auth[1] {
		t.Fatal("the retry sent the rejected token again")
	}
	// One renewal: the refresh (the service's refresh works).
	if logins, refreshes := f.renewals(); logins != 1 || refreshes != 1 {
		t.Fatalf("%d logins, %d refreshes, want 1 and 1", logins, refreshes)
	}
}

func (g *goSuite) testRenewsOn401NotForever(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()
	if err := c.Login(ctx); err != nil {
		t.Fatal(err)
	}
	// A service that rejects every token (say, it trusts another issuer):
	// the wire breaks every bearer token, and the service refuses it.
	f.set(func(f *wire) { f.revokeEvery = true })
	_, err := c.ListDefinitions(ctx)
	if !errors.Is(err, client.ErrInvalidToken) {
		t.Fatalf("err = %v, want invalid_token", err)
	}
	if n := f.count("GET /definitions"); n != 2 {
		t.Fatalf("%d requests, want 2: one retry only", n)
	}
	// One renewal: the refresh (the service's refresh works).
	if logins, refreshes := f.renewals(); logins != 1 || refreshes != 1 {
		t.Fatalf("%d logins, %d refreshes: want one renewal", logins, refreshes)
	}
}

func (g *goSuite) testRefresh(t *testing.T) {
	// renewAfterExpiry logs in, lets the id token come due and makes a call.
	renewAfterExpiry := func(t *testing.T, f *wire, clk *clock, c *client.Client) error {
		t.Helper()
		clk.Advance(time.Hour)
		_, err := c.ListDefinitions(context.Background())
		return err
	}

	t.Run("used when deployed, with the newest refresh token", func(t *testing.T) {
		f := g.newWire(t)
		f.set(func(f *wire) { f.refreshMode = refreshWorks })
		clk := newClock()
		c := f.client(t, clk)
		if err := c.Login(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if err := renewAfterExpiry(t, f, clk, c); err != nil {
				t.Fatal(err)
			}
			var body map[string]string
			if err := json.Unmarshal([]byte(f.strings(func(f *wire) []string { return f.refreshBody })[i]), &body); err != nil {
				t.Fatal(err)
			}
			if body["refresh_token"] != f.strings(func(f *wire) []string { return f.issued })[i] || len(body) != 1 {
				t.Fatalf("refresh %d sent %v, want the refresh token of token set %d", i, body, i)
			}
		}
		if logins, refreshes := f.renewals(); logins != 1 || refreshes != 2 {
			t.Fatalf("%d logins, %d refreshes, want 1 and 2", logins, refreshes)
		}
	})

	for name, mode := range map[string]refreshMode{
		"falls back to login on 404": refreshNotDeployed,
		"falls back to login on 401": refreshRevoked,
	} {
		t.Run(name, func(t *testing.T) {
			f := g.newWire(t)
			f.set(func(f *wire) { f.refreshMode = mode })
			clk := newClock()
			c := f.client(t, clk)
			if err := c.Login(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := renewAfterExpiry(t, f, clk, c); err != nil {
				t.Fatal(err)
			}
			if logins, refreshes := f.renewals(); logins != 2 || refreshes != 1 {
				t.Fatalf("%d logins, %d refreshes, want 2 and 1", logins, refreshes)
			}
		})
	}

	t.Run("other failures are returned, not papered over", func(t *testing.T) {
		f := g.newWire(t)
		clk := newClock()
		c := f.client(t, clk)
		if err := c.Login(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.set(func(f *wire) {
			f.hook = func(w http.ResponseWriter, r *http.Request) bool {
				if r.URL.Path != "/token/refresh" {
					return false
				}
				_ = problem.Write(w, problem.DatabaseUnavailable())
				return true
			}
		})
		err := renewAfterExpiry(t, f, clk, c)
		var e *client.Error
		if !errors.As(err, &e) || e.Code != client.CodeUnavailable || e.Path != "/token/refresh" || e.RetryAfter != 5*time.Second {
			t.Fatalf("err = %v, want the 503 of /token/refresh", err)
		}
		if logins, _ := f.renewals(); logins != 1 || f.count("GET /definitions") != 0 {
			t.Fatal("a failed refresh led to a login or a call")
		}
	})
}

func (g *goSuite) testConcurrentCallsRenewOnce(t *testing.T) {
	for name, tc := range map[string]struct {
		mode                   refreshMode
		logins, refreshes      int
		expire                 func(f *wire, clk *clock)
		minCalls, maxCallsSent int
	}{
		"expired, refresh not deployed": {refreshNotDeployed, 2, 1, func(f *wire, clk *clock) { clk.Advance(time.Hour) }, 20, 20},
		"expired, refresh works":        {refreshWorks, 1, 1, func(f *wire, clk *clock) { clk.Advance(time.Hour) }, 20, 20},
		// Every call may be rejected once before the renewal: 20 to 40 requests.
		"rejected with 401": {refreshWorks, 1, 1, func(f *wire, clk *clock) { f.revokeAll() }, 21, 40},
	} {
		t.Run(name, func(t *testing.T) {
			f := g.newWire(t)
			f.set(func(f *wire) { f.refreshMode = tc.mode })
			clk := newClock()
			// Retries off: every request counted is one call's, and the
			// counts say how the calls shared the renewal.
			c := f.newClient(t, clk, client.Config{
				Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password},
				MaxRetries:  -1,
			})
			ctx := context.Background()
			if err := c.Login(ctx); err != nil {
				t.Fatal(err)
			}
			f.set(func(f *wire) { f.renewDelay = 50 * time.Millisecond }) // let the callers pile up
			tc.expire(f, clk)

			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make(chan error, 20)
			for range 20 {
				wg.Go(func() {
					<-start
					_, err := c.ListDefinitions(ctx)
					errs <- err
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if logins, refreshes := f.renewals(); logins != tc.logins || refreshes != tc.refreshes {
				t.Fatalf("%d logins, %d refreshes, want %d and %d: one renewal", logins, refreshes, tc.logins, tc.refreshes)
			}
			if n := f.count("GET /definitions"); n < tc.minCalls || n > tc.maxCallsSent {
				t.Fatalf("%d requests to /definitions, want %d to %d", n, tc.minCalls, tc.maxCallsSent)
			}
		})
	}
}

func (g *goSuite) testRenewalOutlivesAnImpatientCaller(t *testing.T) {
	f := g.newWire(t)
	f.set(func(f *wire) { f.renewDelay = 200 * time.Millisecond })
	c := f.client(t, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.ListDefinitions(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the caller's deadline", err)
	}
	// A later caller waits for (or finds) the login the first one started.
	if _, err := c.ListDefinitions(context.Background()); err != nil {
		t.Fatal(err)
	}
	if logins, _ := f.renewals(); logins != 1 {
		t.Fatalf("%d logins, want 1", logins)
	}
}

func (g *goSuite) testRefusedRefreshTokenIsNotOfferedAgain(t *testing.T) {
	f := g.newWire(t)
	f.set(func(f *wire) { f.refreshMode = refreshRevoked })
	clk := newClock()
	c := f.client(t, clk)
	ctx := context.Background()
	if err := c.Login(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	// The refresh is refused and the login that follows fails.
	f.set(func(f *wire) {
		f.hook = func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != "/login" {
				return false
			}
			_ = problem.Write(w, problem.Busy())
			return true
		}
	})
	if _, err := c.ListDefinitions(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("err = %v, want the 503 of /login", err)
	}
	f.set(func(f *wire) { f.hook = nil })
	if _, err := c.ListDefinitions(ctx); err != nil {
		t.Fatal(err)
	}
	if _, refreshes := f.renewals(); refreshes != 1 {
		t.Fatalf("%d refreshes, want 1: the refused refresh token was sent again", refreshes)
	}
}

func (g *goSuite) testTokenResponseWithoutIDToken(t *testing.T) {
	f := g.newWire(t)
	f.set(func(f *wire) {
		f.hook = func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != "/login" {
				return false
			}
			writeJSON(w, http.StatusOK, map[string]any{"tokens": map[string]any{"access_token": "a.b.c", "expires_in": 3600}})
			return true
		}
	})
	err := f.client(t, nil).Login(context.Background())
	if err == nil || !strings.Contains(err.Error(), "POST /login") {
		t.Fatalf("err = %v, want a complaint about the token set", err)
	}
}
