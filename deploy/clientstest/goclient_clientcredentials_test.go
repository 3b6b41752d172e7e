package clientstest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	client "github.com/acme/platform/clients/go"
)

// The credentials of a service client the services do not know, with the
// characters that client_secret_basic must form-encode: what the tests
// that send no request, or expect the service's invalid_client, use.
const (
	testClientID     = "cli_reports"
	testClientSecret = "cs_Zm9vYmFyYmF6+/=&:%qux"
)

// serviceClient returns a client of the wire in client-credentials mode,
// with the service client addClient created (testClientID and
// testClientSecret before).
func (f *wire) serviceClient(t testing.TB, clk *clock, scopes ...string) *client.Client {
	t.Helper()
	id, secret := f.clientID, f.clientSecret
	if id == "" {
		id, secret = testClientID, testClientSecret
	}
	return f.newClient(t, clk, client.Config{
		ClientCredentials: client.ClientCredentials{ClientID: id, ClientSecret: secret, Scopes: scopes},
	})
}

// addClient creates a service client of the wire's account with these
// scopes (account create-client); serviceClient then uses it.
func (f *wire) addClient(scopes ...string) {
	f.t.Helper()
	out := f.g.st.admin(f.t, "", "create-client", "--account", f.accountName, "--name", f.username+"-client",
		"--scopes", strings.Join(scopes, ","))
	id, secret := clientIDPattern.FindStringSubmatch(out), clientSecretPattern.FindStringSubmatch(out)
	if id == nil || secret == nil {
		f.t.Fatalf("create-client printed no client_id and client_secret (%d bytes of output)", len(out))
	}
	f.clientID, f.clientSecret = id[1], secret[1]
}

func (g *goSuite) testClientCredentialsGrant(t *testing.T) {
	f := g.newWireInAccount(t, "go-client-credentials") // a service client sees every conversation of its account
	f.addClient(client.ScopeConversationsRead, client.ScopeConversationsWrite)
	f.seed(3)
	c := f.serviceClient(t, nil)
	ctx := context.Background()

	// The client sees every conversation of the account.
	got := subjects(t, c.Conversations(ctx, client.ListOptions{}))
	if len(got) != 3 {
		t.Fatalf("subjects = %v", got)
	}
	reqs := f.tokenRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d token requests, want 1", len(reqs))
	}
	r := reqs[0]
	form, err := url.ParseQuery(r.Body)
	if err != nil || len(form) != 1 || form.Get("grant_type") != "client_credentials" {
		t.Fatalf("token request body %q: want grant_type=client_credentials alone", r.Body)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		t.Fatalf("Content-Type = %q", ct)
	}
	// client_secret_basic: the form-encoded id and secret in Basic.
	req := &http.Request{Header: r.Header}
	id, secret, ok := req.BasicAuth()
	if !ok || id != url.QueryEscape(f.clientID) || secret != url.QueryEscape(f.clientSecret) {
		t.Fatalf("Basic credentials %q:%q", id, secret)
	}
	if strings.Contains(r.Body, "secret") || strings.Contains(r.Body, "password") {
		t.Fatalf("credentials in the body: %q", r.Body)
	}
	// The access token is the bearer; there is no id token.
	tok, err := c.BearerToken(ctx)
	if err != nil || claims(t, tok)["token_use"] != "access" || claims(t, tok)["sub"] != f.clientID {
		t.Fatalf("BearerToken = %v, %v", tok, err)
	}
	if auth := f.strings(func(f *wire) []string { return f.auth }); auth[0] != "Bearer "+tok {
		t.Fatalf("Authorization = %q", auth[0])
	}
	if _, err := c.IDToken(ctx); err == nil {
		t.Fatal("IDToken of a service client")
	}
	// Writes as the client: it is the author.
	conv, err := c.CreateConversation(ctx, client.NewConversation{Participants: []string{f.userID}})
	if err != nil || len(conv.Participants) != 1 {
		t.Fatalf("created %+v, %v", conv, err)
	}
	m, err := c.PostMessage(ctx, conv.ID, client.NewMessage{Body: "Report ready"})
	if err != nil || m.Author != f.clientID {
		t.Fatalf("message %+v, %v", m, err)
	}
	if logins, refreshes := f.renewals(); logins != 0 || refreshes != 0 || len(f.tokenRequests()) != 1 {
		t.Fatalf("%d logins, %d refreshes, %d token requests: want one token request only", logins, refreshes, len(f.tokenRequests()))
	}

	// client_secret_basic form-encodes the id and the secret: a secret
	// with the characters that need it (one the service does not know,
	// since it makes its own) goes out encoded, and is refused.
	f.set(func(f *wire) { f.clientID = "" })
	if err := f.serviceClient(t, nil).Login(ctx); !errors.Is(err, client.ErrInvalidClient) {
		t.Fatalf("unknown client: %v", err)
	}
	reqs = f.tokenRequests()
	id, secret, ok = (&http.Request{Header: reqs[len(reqs)-1].Header}).BasicAuth()
	if !ok || id != url.QueryEscape(testClientID) || secret != url.QueryEscape(testClientSecret) {
		t.Fatalf("Basic credentials %q:%q", id, secret)
	}
}

func (g *goSuite) testClientCredentialsScopes(t *testing.T) {
	f := g.newWire(t)
	f.addClient(client.ScopeConversationsRead, client.ScopeConversationsWrite)
	newest := f.seed(1)[0]
	c := f.serviceClient(t, nil, client.ScopeConversationsRead)
	ctx := context.Background()
	if err := c.Login(ctx); err != nil {
		t.Fatal(err)
	}
	if form, _ := url.ParseQuery(f.tokenRequests()[0].Body); form.Get("scope") != client.ScopeConversationsRead {
		t.Fatalf("scope = %q", form.Get("scope"))
	}
	if _, err := c.GetConversation(ctx, newest.ID); err != nil {
		t.Fatal(err)
	}
	// A write needs the scope it narrowed away: 403, not retried, no new
	// token.
	_, err := c.PostMessage(ctx, newest.ID, client.NewMessage{Body: "x"})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusForbidden || !errors.Is(err, client.ErrInsufficientScope) {
		t.Fatalf("write with a read scope: %v", err)
	}
	if n := len(f.recordedRequests(http.MethodPost, "/v1/conversations/")); n != 1 || len(f.tokenRequests()) != 1 {
		t.Fatalf("%d requests, %d token requests: want neither a retry nor a renewal", n, len(f.tokenRequests()))
	}

	// The same at the account service: no definitions:read.
	_, err = c.ListDefinitions(ctx)
	if !errors.As(err, &e) || e.Status != http.StatusForbidden || !errors.Is(err, client.ErrInsufficientScope) ||
		f.count("GET /definitions") != 1 || len(f.tokenRequests()) != 1 {
		t.Fatalf("definitions without the scope: %v", err)
	}

	// A scope the client lacks is the token endpoint's invalid_scope.
	wide := f.serviceClient(t, nil, client.ScopeDefinitionsWrite)
	err = wide.Login(ctx)
	var o *client.OAuthError
	if !errors.As(err, &o) || o.Status != http.StatusBadRequest || o.Code != client.CodeInvalidScope ||
		!errors.Is(err, client.ErrInvalidScope) || !client.IsCode(err, client.CodeInvalidScope) {
		t.Fatalf("invalid scope: %v", err)
	}
}

func (g *goSuite) testClientCredentialsRenewBeforeExpiry(t *testing.T) {
	f := g.newWire(t)
	f.addClient(client.ScopeDefinitionsRead)
	f.set(func(f *wire) { f.expiresIn = 300 }) // margin: 30 s
	clk := newClock()
	c := f.serviceClient(t, clk)
	ctx := context.Background()
	if _, err := c.ListDefinitions(ctx); err != nil {
		t.Fatal(err)
	}
	first, _ := c.BearerToken(ctx)

	clk.Advance(270*time.Second - time.Millisecond)
	if _, err := c.ListDefinitions(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(f.tokenRequests()); n != 1 {
		t.Fatalf("%d token requests before the margin", n)
	}
	clk.Advance(time.Millisecond)
	if _, err := c.ListDefinitions(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(f.tokenRequests()); n != 2 {
		t.Fatalf("%d token requests at the margin, want 2", n)
	}
	if auth := f.strings(func(f *wire) []string { return f.auth }); auth[len(auth)-1] == "Bearer "+first {
		t.Fatal("the call after the renewal sent the old token")
	}

	// Callers at once share one renewal.
	f.set(func(f *wire) { f.renewDelay = 50 * time.Millisecond })
	clk.Advance(time.Hour)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := c.ListDefinitions(ctx)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.tokenRequests()); n != 3 {
		t.Fatalf("%d token requests for 20 concurrent calls, want one more (3)", n)
	}

	// A token the service rejects is replaced, and the call retried once.
	f.revokeAll()
	if _, err := c.ListDefinitions(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(f.tokenRequests()); n != 4 {
		t.Fatalf("%d token requests after a 401, want 4", n)
	}
	if logins, refreshes := f.renewals(); logins != 0 || refreshes != 0 {
		t.Fatalf("%d logins, %d refreshes", logins, refreshes)
	}
}

func (g *goSuite) testClientCredentialsErrors(t *testing.T) {
	f := g.newWire(t)
	f.addClient(client.ScopeDefinitionsRead)
	// The right id with another secret.
	c := f.newClient(t, nil, client.Config{ClientCredentials: client.ClientCredentials{ClientID: f.clientID, ClientSecret: "cs_another-secret"}})
	ctx := context.Background()

	err := c.Login(ctx)
	var o *client.OAuthError
	if !errors.As(err, &o) {
		t.Fatalf("err = %v (%T), want *client.OAuthError", err, err)
	}
	if o.Status != http.StatusUnauthorized || o.Code != client.CodeInvalidClient || o.Description != "Client authentication failed." ||
		o.Method != http.MethodPost || o.Path != "/oauth2/token" || o.RequestID == "" {
		t.Fatalf("error = %+v", o)
	}
	if !errors.Is(err, client.ErrInvalidClient) || !client.IsCode(err, client.CodeInvalidClient) || errors.Is(err, client.ErrInvalidScope) {
		t.Fatal("IsCode or errors.Is disagree with the code")
	}
	if want := "client: POST /oauth2/token: 401 invalid_client: Client authentication failed. [request id " + o.RequestID + "]"; err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err, want)
	}
	// A resource call fails with the same error, and sends nothing.
	if _, err := c.ListDefinitions(ctx); !errors.Is(err, client.ErrInvalidClient) || f.count("GET /definitions") != 0 {
		t.Fatalf("ListDefinitions: %v", err)
	}

	// Throttled, and the database down: OAuth errors with Retry-After that
	// also match the sentinels of the problem codes. Stand-ins with the
	// service's bodies: the throttle would lock the client for 15 minutes,
	// and the database of the suites cannot be taken down.
	for _, tc := range []struct {
		status int
		code   string
		is     error
		after  time.Duration
	}{
		{http.StatusTooManyRequests, client.CodeSlowDown, client.ErrTooManyRequests, 30 * time.Second},
		{http.StatusServiceUnavailable, client.CodeTemporarilyUnavailable, client.ErrUnavailable, 5 * time.Second},
	} {
		f.set(func(f *wire) {
			f.hook = func(w http.ResponseWriter, r *http.Request) bool {
				if r.URL.Path != "/oauth2/token" {
					return false
				}
				w.Header().Set("Cache-Control", "no-store")
				w.Header().Set("Retry-After", strconv.Itoa(int(tc.after/time.Second)))
				desc := map[int]string{http.StatusTooManyRequests: "Too many failed attempts; retry later.",
					http.StatusServiceUnavailable: "The database is unreachable; retry later."}[tc.status]
				writeJSON(w, tc.status, map[string]string{"error": tc.code, "error_description": desc})
				return true
			}
		})
		err := c.Login(ctx)
		if !errors.As(err, &o) || o.Status != tc.status || o.Code != tc.code || o.RetryAfter != tc.after || !errors.Is(err, tc.is) {
			t.Fatalf("%d: %v", tc.status, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("[retry after %s]", tc.after)) {
			t.Fatalf("Error() = %q", err)
		}
	}
	f.set(func(f *wire) { f.hook = nil })

	// A problem from the token endpoint (say, from a gateway: a stand-in) stays an
	// *Error with its Retry-After.
	f.set(func(f *wire) {
		f.hook = func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != "/oauth2/token" {
				return false
			}
			w.Header().Set("Retry-After", "5")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"type":"urn:problem-type:service_unavailable","title":"Service Unavailable","status":503,"code":"service_unavailable"}`)
			return true
		}
	})
	var e *client.Error
	if err := c.Login(ctx); !errors.As(err, &e) || e.Code != client.CodeUnavailable || e.RetryAfter != 5*time.Second {
		t.Fatalf("503: %v", err)
	}

	// Token responses the client cannot use (stand-ins: the service's are
	// complete).
	for name, body := range map[string]string{
		"no access token": `{"token_type":"Bearer","expires_in":3600}`,
		"no expiry":       `{"access_token":"a.b.c","token_type":"Bearer"}`,
		"not a bearer":    `{"access_token":"a.b.c","token_type":"mac","expires_in":3600}`,
	} {
		f.set(func(f *wire) {
			f.hook = func(w http.ResponseWriter, r *http.Request) bool {
				if r.URL.Path != "/oauth2/token" {
					return false
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, body)
				return true
			}
		})
		if err := c.Login(ctx); err == nil || !strings.Contains(err.Error(), "POST /oauth2/token") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func (g *goSuite) testClientSecretNeverShows(t *testing.T) {
	f := g.newWire(t)
	c := f.serviceClient(t, nil)
	ctx := context.Background()
	basic := base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(testClientID) + ":" + url.QueryEscape(testClientSecret)))
	secrets := []string{testClientSecret, url.QueryEscape(testClientSecret), basic}

	// The error holds the answer, whose texts stay as the server wrote
	// them, and nothing of the request (the service's own invalid_client:
	// testClientID is unknown to it).
	err := c.Login(ctx)
	var o *client.OAuthError
	if !errors.As(err, &o) {
		t.Fatalf("err = %v", err)
	}
	for _, s := range []string{err.Error(), fmt.Sprintf("%+v", o), fmt.Sprintf("%#v", o), fmt.Sprintf("%v", err)} {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Fatalf("error shows a secret: %s", s)
			}
		}
		if strings.Contains(s, "[redacted]") || !strings.Contains(s, "Client authentication failed.") {
			t.Fatalf("error %s: want the answer's text intact", s)
		}
	}

	// The configuration prints without it.
	cfg := client.Config{AccountURL: "http://a", ClientCredentials: client.ClientCredentials{
		ClientID: testClientID, ClientSecret: testClientSecret, Scopes: []string{client.ScopeConversationsRead}}}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "credentials", cfg.ClientCredentials)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "config", cfg)
	out := fmt.Sprintf("%v %+v %#v %s %v %q %x", cfg, cfg, cfg, cfg.ClientCredentials, &cfg.ClientCredentials,
		cfg.ClientCredentials, cfg.ClientCredentials) + logs.String()
	if strings.Contains(out, testClientSecret) || strings.Contains(out, "Zm9vYmFyYmF6") {
		t.Fatalf("secret printed: %s", out)
	}
	if !strings.Contains(out, testClientID) || !strings.Contains(out, client.ScopeConversationsRead) {
		t.Fatalf("id or scope missing: %s", out)
	}
}

func (g *goSuite) testNewChecksTheClientCredentials(t *testing.T) {
	user := client.Credentials{AccountName: "acme", Username: "alice", Password: testPassword}
	svc := client.ClientCredentials{ClientID: testClientID, ClientSecret: testClientSecret}
	for name, cfg := range map[string]client.Config{
		"both":          {AccountURL: "http://a", Credentials: user, ClientCredentials: svc},
		"neither":       {AccountURL: "http://a"},
		"no secret":     {AccountURL: "http://a", ClientCredentials: client.ClientCredentials{ClientID: testClientID}},
		"no id":         {AccountURL: "http://a", ClientCredentials: client.ClientCredentials{ClientSecret: testClientSecret}},
		"a blank scope": {AccountURL: "http://a", ClientCredentials: client.ClientCredentials{ClientID: "x", ClientSecret: testClientSecret, Scopes: []string{"a b"}}},
		"scopes alone":  {AccountURL: "http://a", ClientCredentials: client.ClientCredentials{Scopes: []string{"x"}}},
	} {
		_, err := client.New(cfg)
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), testClientSecret) || strings.Contains(err.Error(), testPassword) {
			t.Errorf("%s: error %q shows a secret", name, err)
		}
	}
	if _, err := client.New(client.Config{AccountURL: "http://a", ClientCredentials: svc}); err != nil {
		t.Fatal(err)
	}
	// The client keeps its own copy of the scopes.
	f := g.newWire(t)
	f.addClient(client.ScopeConversationsRead, client.ScopeDefinitionsRead)
	scopes := []string{client.ScopeDefinitionsRead}
	c, err := client.New(client.Config{AccountURL: f.account.URL, ClientCredentials: client.ClientCredentials{
		ClientID: f.clientID, ClientSecret: f.clientSecret, Scopes: scopes}})
	if err != nil {
		t.Fatal(err)
	}
	scopes[0] = "definitions:write"
	if err := c.Login(context.Background()); err != nil {
		t.Fatal(err)
	}
}
