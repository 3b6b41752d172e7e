package http_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/acme/platform/pkg/testkit/openapitest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
)

// oauthAPI is the account service on a fresh database, its issuer URL
// its own address (so that OAuth libraries can follow discovery), with a
// clock for the refresh retry grace. Every exchange, also those of
// golang.org/x/oauth2, is validated against the OpenAPI document.
type oauthAPI struct {
	*api
	reg            *prometheus.Registry
	clock          *clock
	acme, globex   account.Account
	discovery      map[string]any
	tokenEndpoint  string
	revokeEndpoint string
	// mfa enrols second factors directly, on the test's clock.
	mfa *account.MFA
}

func newOAuthAPI(t *testing.T, doc *openapitest.Validator, grace time.Duration) *oauthAPI {
	t.Helper()
	ctx := context.Background()
	store := newStore(t)
	hasher := cheapHasher(t)
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	kit := newTokenKitFor(t, "ES256", base)
	clk := &clock{now: time.Now()}
	// Failed client authentications lock a client id after 5 (and the
	// password grant a user, as logins); the address limit is off, every
	// test request comes from one.
	throttle := &account.LoginThrottle{Store: store, Now: clk.Now, SettleTimeout: testSettleTimeout, Policy: account.ThrottlePolicy{
		User: account.ThrottleLimit{MaxFailures: 5, Window: time.Hour, Lockout: time.Hour, MaxLockout: time.Hour},
	}}
	sessions := kit.sessions(store, hasher, throttle)
	sessions.ReuseGrace = grace
	sessions.Now = clk.Now
	sessions.MFA = newTestMFA(t, store, hasher, throttle, clk.Now)
	// The client cache of a deployment (ACCOUNT_CLIENT_AUTH_CACHE_TTL).
	authz := &account.Authorizations{Sessions: sessions, Clients: store, ClientCache: account.NewClientCache(time.Second, 0),
		Browser: store, Codes: store, IDTokens: kit.verifier, Issuer: base, Now: clk.Now}
	reg := prometheus.NewRegistry()
	srv.Config.Handler = spanSecrets.Handler(accounthttp.NewHandler(accounthttp.Deps{
		Metrics:        reg,
		Sessions:       sessions,
		Authorizations: authz,
		Definitions:    store,
		Verifier:       kit.verifier,
		Keys:           kit.keys,
		IssuerURL:      base,
	}))
	srv.Start()
	t.Cleanup(srv.Close)

	o := &oauthAPI{
		api:   &api{t: t, srv: srv, doc: doc, store: store, keys: kit.ring, verifier: kit.verifier},
		reg:   reg,
		clock: clk,
		mfa:   sessions.MFA,
	}
	accounts := map[string]*account.Account{"acme": &o.acme, "globex": &o.globex}
	for _, u := range []struct{ acc, user, pw string }{
		{"acme", "alice", "alice-password"},
		{"acme", "mallory", "mallory-password"},
		{"globex", "bob", "bob-password"},
	} {
		acc := accounts[u.acc]
		if acc.ID == "" {
			created, err := store.CreateAccount(ctx, u.acc)
			if err != nil {
				t.Fatal(err)
			}
			*acc = created
		}
		addUser(t, store, hasher, acc.ID, u.user, u.pw)
	}
	r := o.call("GET", "/.well-known/openid-configuration", "", "")
	r.json(t, &o.discovery)
	o.tokenEndpoint, _ = o.discovery["token_endpoint"].(string)
	o.revokeEndpoint, _ = o.discovery["revocation_endpoint"].(string)
	return o
}

// newClient creates a service client of acc and returns its id and secret.
func (o *oauthAPI) newClient(acc account.Account, scopes ...string) (string, string) {
	o.t.Helper()
	c, secret, err := account.NewServiceClient(acc, "test client", scopes)
	c.Grants = account.LegacyGrants(false) // the password grant too, as clients stored before grants
	if err != nil {
		o.t.Fatal(err)
	}
	created, err := o.store.CreateClient(context.Background(), c)
	if err != nil {
		o.t.Fatal(err)
	}
	return created.ID, secret
}

// validating checks every exchange of a client it is the transport of.
type validating struct {
	t   *testing.T
	doc *openapitest.Validator
	// requestValid: validate the requests too, not only the responses.
	requestValid bool
}

func (v validating) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	if v.requestValid {
		v.doc.Check(v.t, req, reqBody, resp, respBody)
	} else {
		v.doc.CheckResponse(v.t, req, resp, respBody)
	}
	return resp, nil
}

// oauthContext makes golang.org/x/oauth2 use a validating HTTP client.
func (o *oauthAPI) oauthContext() context.Context {
	return context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Transport: validating{t: o.t, doc: o.doc, requestValid: true}})
}

// postForm sends a form to an OAuth endpoint; edit may change the request
// (headers). Only the response is validated: many of these requests are
// deliberately wrong.
func (o *oauthAPI) postForm(endpoint, body, contentType string, edit func(*http.Request)) oauthResponse {
	o.t.Helper()
	req, err := http.NewRequest("POST", endpoint, strings.NewReader(body))
	if err != nil {
		o.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if edit != nil {
		edit(req)
	}
	resp, respBody := o.doc.DoResponseOnly(o.t, o.srv.Client(), req)
	return oauthResponse{
		response:      response{status: resp.StatusCode, header: resp.Header, body: respBody},
		authorization: req.Header.Get("Authorization") != "",
	}
}

// oauthResponse is the answer of an OAuth endpoint, and whether the
// request carried an Authorization header.
type oauthResponse struct {
	response
	authorization bool
}

const formType = "application/x-www-form-urlencoded"

func basic(id, secret string) func(*http.Request) {
	return func(r *http.Request) {
		r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(id)+":"+url.QueryEscape(secret))))
	}
}

// oauthError checks an RFC 6749 section 5.2 error response: an
// invalid_client carries a Basic challenge when, and only when, the client
// used the Authorization header (section 5.2).
func (r oauthResponse) oauthError(t *testing.T, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", cc)
	}
	var body struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	r.json(t, &body)
	if body.Error != code || body.Description == "" {
		t.Errorf("error = %+v, want %q with a description", body, code)
	}
	challenge := r.header.Get("WWW-Authenticate")
	switch {
	case code == "invalid_client" && r.authorization && !strings.HasPrefix(challenge, "Basic "):
		t.Errorf("invalid_client after an Authorization header without a Basic challenge: %q", challenge)
	case (code != "invalid_client" || !r.authorization) && challenge != "":
		t.Errorf("%s without an Authorization header has a challenge: %q", code, challenge)
	}
}

// tokenResponse is a successful token response, as sent.
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int    `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	IDToken      string `json:"id_token"`
	Scope        string `json:"scope"`
}

func (r oauthResponse) tokens(t *testing.T) tokenResponse {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status = %d, want 200; body %s", r.status, r.body)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", cc)
	}
	var out tokenResponse
	r.json(t, &out)
	return out
}

func TestOAuth(t *testing.T) {
	t.Parallel()
	doc := openapitest.Load(t, accounthttp.OpenAPI)
	o := newOAuthAPI(t, doc, 0)

	t.Run("Discovery", func(t *testing.T) { testOAuthDiscovery(t, o) })
	t.Run("ClientCredentials", func(t *testing.T) { testClientCredentials(t, o) })
	t.Run("ClientTokensByScope", func(t *testing.T) { testClientTokenScopes(t, o) })
	t.Run("PasswordGrantAndRefreshingTokenSource", func(t *testing.T) { testPasswordGrant(t, o) })
	t.Run("PasswordGrantWithoutClient", func(t *testing.T) { testPublicPasswordGrant(t, o) })
	t.Run("PublicClient", func(t *testing.T) { testPublicClient(t, o) })
	t.Run("TokenEndpointBadInput", func(t *testing.T) { testTokenEndpointBadInput(t, o) })
	t.Run("RefreshTokenOfAnotherClientOrAccount", func(t *testing.T) { testRefreshOfAnotherClient(t, o) })
	t.Run("Revocation", func(t *testing.T) { testRevocation(t, o) })
	t.Run("AmbiguousCredentials", func(t *testing.T) { testAmbiguousCredentials(t, o) })
	t.Run("FailedClientAuthenticationIsThrottled", func(t *testing.T) { testClientThrottle(t, o) })
	t.Run("PasswordGrantIsThrottled", func(t *testing.T) { testPasswordGrantThrottle(t, o) })

	g := newOAuthAPI(t, doc, 10*time.Second)
	t.Run("RefreshRetryWithinGrace", func(t *testing.T) { testRefreshRetryWithinGrace(t, g) })
	t.Run("RefreshReplayAfterGraceRevokes", func(t *testing.T) { testRefreshReplayAfterGrace(t, g) })
	t.Run("RefreshOlderTokenWithinGraceRevokes", func(t *testing.T) { testRefreshOlderTokenWithinGrace(t, g) })
	t.Run("ConcurrentRefreshWithinGrace", func(t *testing.T) { testConcurrentRefreshWithinGrace(t, g) })
	t.Run("RefreshGrantRetryWithinGrace", func(t *testing.T) { testRefreshGrantRetry(t, g) })

	// The routes of TestAPI are covered there; 503 needs a database outage.
	doc.AssertAllOperationsCovered(t, "* * 503", "* /login *", "* /token/refresh *", "* /logout *",
		"* /.well-known/jwks.json *", "* /openapi.yaml *", "* /definitions 401", "* /definitions/{id} 401",
		"POST /definitions 413", "POST /definitions 415", "PUT /definitions/{id} 413", "PUT /definitions/{id} 415",
		"PUT /definitions/{id} 404", "DELETE /definitions/{id} 404", "* /users *", "* /users/* *", "* /users/*/password *", "* /userinfo *", "* /password *", "* /mfa/* *", "* /mfa/*/* *", "* /users/*/mfa *",
		// TestSignIn covers the sign-in flow.
		"* /oauth2/authorize *", "* /oauth2/signin *", "* /oauth2/logout *", "* /oauth2/assets/* *")
}

func testOAuthDiscovery(t *testing.T, o *oauthAPI) {
	base := o.srv.URL
	d := o.discovery
	if d["issuer"] != base || d["token_endpoint"] != base+"/oauth2/token" || d["revocation_endpoint"] != base+"/oauth2/revoke" ||
		d["jwks_uri"] != base+"/.well-known/jwks.json" {
		t.Fatalf("discovery = %v", d)
	}
	list := func(name string) []string {
		var out []string
		for _, v := range d[name].([]any) {
			out = append(out, v.(string))
		}
		slices.Sort(out)
		return out
	}
	for name, want := range map[string][]string{
		"grant_types_supported":                 {"authorization_code", "client_credentials", "password", "refresh_token"},
		"token_endpoint_auth_methods_supported": {"client_secret_basic", "client_secret_post", "none"},
		"scopes_supported": {"conversations:read", "conversations:write", "definitions:read", "definitions:write",
			"email", "offline_access", "openid", "profile", "users:read", "users:write", "webhooks:manage"},
		"response_types_supported":         {"code"},
		"code_challenge_methods_supported": {"S256"},
		"prompt_values_supported":          {"login", "none"},
		"response_modes_supported":         {"query"},
	} {
		if got := list(name); !slices.Equal(got, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Every endpoint it names exists: /login is not an OAuth token endpoint.
	for _, name := range []string{"token_endpoint", "revocation_endpoint", "userinfo_endpoint"} {
		r := o.postForm(d[name].(string), "", formType, nil)
		if r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d", name, d[name], r.status)
		}
	}
}

func testClientCredentials(t *testing.T, o *oauthAPI) {
	id, secret := o.newClient(o.acme, "definitions:read", "conversations:read")
	ctx := o.oauthContext()
	for name, style := range map[string]oauth2.AuthStyle{
		"client_secret_basic": oauth2.AuthStyleInHeader,
		"client_secret_post":  oauth2.AuthStyleInParams,
		"auto-detected":       oauth2.AuthStyleAutoDetect,
	} {
		t.Run(name, func(t *testing.T) {
			cfg := clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: o.tokenEndpoint, AuthStyle: style}
			tok, err := cfg.Token(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tok.TokenType != "Bearer" || tok.RefreshToken != "" || tok.Extra("id_token") != nil ||
				tok.Extra("scope") != "conversations:read definitions:read" || tok.Extra("expires_in") != float64(3600) {
				t.Fatalf("token = %+v, scope %v, id_token %v", tok, tok.Extra("scope"), tok.Extra("id_token"))
			}
			c, err := o.verifier.Verify(context.Background(), tok.AccessToken)
			if err != nil {
				t.Fatal(err)
			}
			if c.Type != "at+jwt" || c.Use != token.UseAccess || c.Subject != id || c.ClientID != id ||
				c.AccountID != o.acme.ID || c.AccountName != "acme" || c.SessionID != "" || c.PreferredUsername != "" ||
				!slices.Equal(c.Scopes, []string{"conversations:read", "definitions:read"}) {
				t.Fatalf("claims = %+v", c)
			}
		})
	}
	t.Run("narrowed scope", func(t *testing.T) {
		cfg := clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: o.tokenEndpoint, Scopes: []string{"definitions:read"}}
		tok, err := cfg.Token(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c, err := o.verifier.Verify(context.Background(), tok.AccessToken)
		if err != nil || tok.Extra("scope") != "definitions:read" || !slices.Equal(c.Scopes, []string{"definitions:read"}) {
			t.Fatalf("scope %v, claims %+v, %v", tok.Extra("scope"), c, err)
		}
	})
	t.Run("two scopes separated by one space", func(t *testing.T) {
		cfg := clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: o.tokenEndpoint,
			Scopes: []string{"definitions:read", "conversations:read"}}
		tok, err := cfg.Token(ctx)
		if err != nil || tok.Extra("scope") != "conversations:read definitions:read" {
			t.Fatalf("scope %v, %v", tok.Extra("scope"), err)
		}
	})
	t.Run("the library's client calls the API", func(t *testing.T) {
		cfg := clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: o.tokenEndpoint}
		resp, err := cfg.Client(ctx).Get(o.srv.URL + "/definitions")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
			t.Fatalf("GET /definitions: %d %s", resp.StatusCode, body)
		}
	})
}

// clientToken obtains a client-credentials token with the raw protocol.
func (o *oauthAPI) clientToken(id, secret string) string {
	o.t.Helper()
	return o.postForm(o.tokenEndpoint, "grant_type=client_credentials", formType, basic(id, secret)).tokens(o.t).AccessToken
}

func testClientTokenScopes(t *testing.T, o *oauthAPI) {
	readerID, readerSecret := o.newClient(o.globex, "definitions:read")
	writerID, writerSecret := o.newClient(o.globex, "definitions:write")
	convID, convSecret := o.newClient(o.globex, "conversations:read", "conversations:write")
	reader, writer, other := o.clientToken(readerID, readerSecret), o.clientToken(writerID, writerSecret), o.clientToken(convID, convSecret)

	r := o.call("POST", "/definitions", writer, `{"name":"CRM","type":"salesforce"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create with definitions:write: %d %s", r.status, r.body)
	}
	var created definition
	r.json(t, &created)
	var list []definition
	o.call("GET", "/definitions", reader, "").json(t, &list)
	if len(list) != 1 || list[0].ID != created.ID {
		t.Fatalf("list with definitions:read = %+v", list)
	}
	if r := o.call("GET", "/definitions/"+created.ID, reader, ""); r.status != http.StatusOK {
		t.Fatalf("get with definitions:read: %d", r.status)
	}
	// A user of the account sees what the client created, and a user of
	// another account does not.
	bob := o.login("globex", "bob", "bob-password")
	o.call("GET", "/definitions", bob.AccessToken, "").json(t, &list)
	if len(list) != 1 {
		t.Fatalf("bob's list = %+v", list)
	}
	alice := o.login("acme", "alice", "alice-password")
	o.call("GET", "/definitions/"+created.ID, alice.AccessToken, "").problem(t, http.StatusNotFound, "not_found")

	for _, tc := range []struct {
		method, path, bearer, body, scope string
	}{
		{"GET", "/definitions", writer, "", "definitions:read"},
		{"GET", "/definitions/" + created.ID, other, "", "definitions:read"},
		{"POST", "/definitions", reader, `{"name":"x","type":"y"}`, "definitions:write"},
		{"PUT", "/definitions/" + created.ID, reader, `{"name":"x","type":"y"}`, "definitions:write"},
		{"DELETE", "/definitions/" + created.ID, other, "", "definitions:write"},
	} {
		r := o.call(tc.method, tc.path, tc.bearer, tc.body)
		r.problem(t, http.StatusForbidden, "insufficient_scope")
		if got, want := r.header.Get("WWW-Authenticate"), `Bearer error="insufficient_scope", scope="`+tc.scope+`"`; got != want {
			t.Errorf("%s %s: WWW-Authenticate = %q, want %q", tc.method, tc.path, got, want)
		}
	}
	// Refused writes changed nothing.
	var still definition
	o.call("GET", "/definitions/"+created.ID, reader, "").json(t, &still)
	if still.Name != "CRM" {
		t.Fatalf("definition after refused writes = %+v", still)
	}
	if r := o.call("PUT", "/definitions/"+created.ID, writer, `{"name":"CRM 2","type":"salesforce"}`); r.status != http.StatusOK {
		t.Fatalf("replace with definitions:write: %d", r.status)
	}
	if r := o.call("DELETE", "/definitions/"+created.ID, writer, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete with definitions:write: %d", r.status)
	}
}

func testPasswordGrant(t *testing.T, o *oauthAPI) {
	id, secret := o.newClient(o.acme, "definitions:read")
	ctx := o.oauthContext()
	cfg := oauth2.Config{ClientID: id, ClientSecret: secret, Endpoint: oauth2.Endpoint{TokenURL: o.tokenEndpoint}}
	tok, err := cfg.PasswordCredentialsToken(ctx, "alice", "alice-password")
	if err != nil {
		t.Fatal(err)
	}
	if tok.TokenType != "Bearer" || tok.RefreshToken == "" || tok.Extra("id_token") == nil || tok.Extra("expires_in") != float64(3600) {
		t.Fatalf("token = %+v", tok)
	}
	first, err := o.verifier.Verify(context.Background(), tok.AccessToken)
	if err != nil || first.Subject == "" || first.ClientID != cfg.ClientID || first.IsClient() || first.AccountName != "acme" || first.SessionID == "" {
		t.Fatalf("access token claims = %+v, %v", first, err)
	}
	// A user's token acts as the user, without scopes: it may write.
	if r := o.call("POST", "/definitions", tok.AccessToken, `{"name":"mine","type":"x"}`); r.status != http.StatusCreated {
		t.Fatalf("user token writes: %d", r.status)
	}
	// The id token names the client (OpenID Connect Core 3.1.3.7) and
	// still passes the services' verifier, which wants the platform.
	o.idTokenOf(t, tok.Extra("id_token"), id)

	// The refreshing TokenSource exchanges the refresh token once the
	// access token has expired, and keeps the session.
	expired := *tok
	expired.Expiry = time.Now().Add(-time.Minute)
	src := cfg.TokenSource(ctx, &expired)
	renewed, err := src.Token()
	if err != nil {
		t.Fatal(err)
	}
	if renewed.AccessToken == tok.AccessToken || renewed.RefreshToken == tok.RefreshToken {
		t.Fatal("the token source did not refresh")
	}
	second, err := o.verifier.Verify(context.Background(), renewed.AccessToken)
	if err != nil || second.SessionID != first.SessionID || second.Subject != first.Subject {
		t.Fatalf("refreshed claims = %+v, %v; want the session of %+v", second, err, first)
	}
	o.idTokenOf(t, renewed.Extra("id_token"), id)
	// The spent refresh token is reuse (strict server): the session ends.
	spent := *tok
	spent.Expiry = time.Now().Add(-time.Minute)
	if _, err := cfg.TokenSource(ctx, &spent).Token(); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("spent refresh token: %v, want invalid_grant", err)
	}
	renewed.Expiry = time.Now().Add(-time.Minute)
	if _, err := cfg.TokenSource(ctx, renewed).Token(); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("current refresh token after reuse: %v, want invalid_grant", err)
	}

	// The user must be of the client's account (account_name defaults to
	// it), and the password must be right.
	for _, bad := range [][2]string{{"bob", "bob-password"}, {"alice", "wrong"}} {
		if _, err := cfg.PasswordCredentialsToken(ctx, bad[0], bad[1]); !isOAuthError(err, "invalid_grant") {
			t.Errorf("%s/%s: %v, want invalid_grant", bad[0], bad[1], err)
		}
	}
	r := o.postForm(o.tokenEndpoint, "grant_type=password&username=bob&password=bob-password&account_name=globex", formType, basic(id, secret))
	r.oauthError(t, http.StatusBadRequest, "invalid_grant")
}

// idTokenOf verifies an id token with the services' verifier (the
// platform audience) and checks whom it is for: aud is the platform and
// clientID, and azp is clientID; for no client (""), aud is the platform
// alone and there is no azp, as /login's.
func (o *oauthAPI) idTokenOf(t *testing.T, raw any, clientID string) *token.Claims {
	t.Helper()
	s, _ := raw.(string)
	c, err := o.verifier.Verify(context.Background(), s)
	if err != nil {
		t.Fatalf("id token: %v", err)
	}
	want := []string{audience}
	if clientID != "" {
		want = append(want, clientID)
	}
	if c.Use != token.UseID || !slices.Equal(c.Audience, want) || c.AuthorizedParty != clientID || c.ClientID != "" {
		t.Fatalf("id token claims = %+v; want aud %v and azp %q", c, want, clientID)
	}
	return c
}

// A public client has no secret: it presents its client_id alone, for the
// password and refresh grants and revocation, and its id tokens name it.
func testPublicClient(t *testing.T, o *oauthAPI) {
	ctx := context.Background()
	pc, err := account.NewPublicClient(o.acme, "single-page app")
	pc.Grants = account.LegacyGrants(true)
	if err != nil {
		t.Fatal(err)
	}
	created, err := o.store.CreateClient(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	id := created.ID
	confID, confSecret := o.newClient(o.acme, "definitions:read")

	// golang.org/x/oauth2 with an empty secret sends client_id alone.
	cfg := oauth2.Config{ClientID: id, Endpoint: oauth2.Endpoint{TokenURL: o.tokenEndpoint, AuthStyle: oauth2.AuthStyleInParams}}
	tok, err := cfg.PasswordCredentialsToken(o.oauthContext(), "alice", "alice-password")
	if err != nil {
		t.Fatal(err)
	}
	first := o.idTokenOf(t, tok.Extra("id_token"), id)
	tok.Expiry = time.Now().Add(-time.Minute)
	renewed, err := cfg.TokenSource(o.oauthContext(), tok).Token()
	if err != nil {
		t.Fatal(err)
	}
	if again := o.idTokenOf(t, renewed.Extra("id_token"), id); again.SessionID != first.SessionID {
		t.Fatalf("refreshed id token of session %q, want %q", again.SessionID, first.SessionID)
	}
	// account_name may be given (it must then be the client's account).
	set := o.postForm(o.tokenEndpoint, "grant_type=password&username=alice&password=alice-password&account_name=acme&client_id="+id, formType, nil).tokens(t)
	o.idTokenOf(t, set.IDToken, id)

	for _, tc := range []struct {
		name, body string
		edit       func(*http.Request)
		status     int
		code       string
	}{
		{"client_credentials", "grant_type=client_credentials&client_id=" + id, nil, 400, "unauthorized_client"},
		{"a secret in the body", "grant_type=password&username=alice&password=alice-password&client_id=" + id + "&client_secret=cs_x", nil, 401, "invalid_client"},
		{"a secret by HTTP Basic", "grant_type=password&username=alice&password=alice-password", basic(id, "cs_x"), 401, "invalid_client"},
		{"an unknown client_id alone", "grant_type=password&username=alice&password=alice-password&client_id=cli_nope", nil, 401, "invalid_client"},
		{"a confidential client's id alone", "grant_type=password&username=alice&password=alice-password&client_id=" + confID, nil, 401, "invalid_client"},
		{"a user of another account", "grant_type=password&username=bob&password=bob-password&account_name=globex&client_id=" + id, nil, 400, "invalid_grant"},
		{"its refresh token without it", "grant_type=refresh_token&refresh_token=" + set.RefreshToken, nil, 400, "invalid_grant"},
		{"its refresh token by another client", "grant_type=refresh_token&refresh_token=" + set.RefreshToken, basic(confID, confSecret), 400, "invalid_grant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o.postForm(o.tokenEndpoint, tc.body, formType, tc.edit).oauthError(t, tc.status, tc.code)
		})
	}
	// Another client's refresh token is not the public client's either.
	other := o.postForm(o.tokenEndpoint, "grant_type=password&username=alice&password=alice-password", formType, basic(confID, confSecret)).tokens(t)
	o.postForm(o.tokenEndpoint, "grant_type=refresh_token&refresh_token="+other.RefreshToken+"&client_id="+id, formType, nil).
		oauthError(t, http.StatusBadRequest, "invalid_grant")

	// Nothing above spent the session: it refreshes, keeping aud and azp,
	// and its client revokes it.
	next := o.postForm(o.tokenEndpoint, "grant_type=refresh_token&refresh_token="+set.RefreshToken+"&client_id="+id, formType, nil).tokens(t)
	o.idTokenOf(t, next.IDToken, id)
	if r := o.postForm(o.revokeEndpoint, "token="+next.RefreshToken+"&client_id="+id, formType, nil); r.status != http.StatusOK {
		t.Fatalf("revoke by the public client: %d %s", r.status, r.body)
	}
	o.postForm(o.tokenEndpoint, "grant_type=refresh_token&refresh_token="+next.RefreshToken+"&client_id="+id, formType, nil).
		oauthError(t, http.StatusBadRequest, "invalid_grant")

	// A disabled public client is refused like any other.
	if err := o.store.SetClientDisabled(ctx, o.acme.ID, id, true); err != nil {
		t.Fatal(err)
	}
	o.postForm(o.tokenEndpoint, "grant_type=password&username=alice&password=alice-password&client_id="+id, formType, nil).
		oauthError(t, http.StatusUnauthorized, "invalid_client")
}

func isOAuthError(err error, code string) bool {
	var re *oauth2.RetrieveError
	return errors.As(err, &re) && re.ErrorCode == code
}

// Without client authentication the password grant is POST /login in
// OAuth's shape: account_name is required.
func testPublicPasswordGrant(t *testing.T, o *oauthAPI) {
	r := o.postForm(o.tokenEndpoint, "grant_type=password&username=Alice&password=alice-password&account_name=ACME", formType, nil)
	set := r.tokens(t)
	if set.TokenType != "Bearer" || set.RefreshToken == "" || set.IDToken == "" || set.ExpiresIn != 3600 || set.Scope != "" {
		t.Fatalf("token response = %+v", set)
	}
	id := o.idTokenOf(t, set.IDToken, "")
	if id.PreferredUsername != "alice" || id.AccountName != "acme" {
		t.Fatalf("id token = %+v", id)
	}
	// Its refresh token refreshes on /token/refresh and with the grant.
	status, next := o.refresh(set.RefreshToken)
	if status != http.StatusOK {
		t.Fatalf("/token/refresh: %d", status)
	}
	again := o.postForm(o.tokenEndpoint, "grant_type=refresh_token&refresh_token="+next.RefreshToken, formType, nil).tokens(t)
	if again.RefreshToken == "" || again.IDToken == "" {
		t.Fatalf("refresh grant = %+v", again)
	}
	// And /login's refresh tokens refresh with the grant.
	login := o.login("acme", "alice", "alice-password")
	o.postForm(o.tokenEndpoint, "grant_type=refresh_token&refresh_token="+login.RefreshToken, formType, nil).tokens(t)
}

func testTokenEndpointBadInput(t *testing.T, o *oauthAPI) {
	id, secret := o.newClient(o.acme, "definitions:read")
	disabledID, disabledSecret := o.newClient(o.acme, "definitions:read")
	if err := o.store.SetClientDisabled(context.Background(), o.acme.ID, disabledID, true); err != nil {
		t.Fatal(err)
	}
	otherID, _ := o.newClient(o.globex, "definitions:write")
	login := o.login("acme", "alice", "alice-password")
	cases := []struct {
		name, body, contentType string
		edit                    func(*http.Request)
		status                  int
		code                    string
	}{
		{"missing grant_type", "scope=definitions:read", formType, basic(id, secret), 400, "invalid_request"},
		{"empty grant_type", "grant_type=", formType, basic(id, secret), 400, "invalid_request"},
		{"unknown grant_type", "grant_type=urn:ietf:params:oauth:grant-type:device_code&device_code=x", formType, basic(id, secret), 400, "unsupported_grant_type"},
		{"implicit-style grant", "grant_type=token", formType, nil, 400, "unsupported_grant_type"},
		{"client_credentials without a client", "grant_type=client_credentials", formType, nil, 401, "invalid_client"},
		{"wrong client secret", "grant_type=client_credentials", formType, basic(id, secret+"x"), 401, "invalid_client"},
		{"wrong client secret in the body", "grant_type=client_credentials&client_id=" + id + "&client_secret=cs_nope", formType, nil, 401, "invalid_client"},
		{"client_id without a secret", "grant_type=client_credentials&client_id=" + id, formType, nil, 401, "invalid_client"},
		{"unknown client", "grant_type=client_credentials", formType, basic("cli_nope", secret), 401, "invalid_client"},
		{"disabled client", "grant_type=client_credentials", formType, basic(disabledID, disabledSecret), 401, "invalid_client"},
		{"another client's secret", "grant_type=client_credentials", formType, basic(otherID, secret), 401, "invalid_client"},
		{"bearer instead of client credentials", "grant_type=client_credentials", formType,
			func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+login.AccessToken) }, 401, "invalid_client"},
		{"malformed basic", "grant_type=client_credentials", formType,
			func(r *http.Request) { r.Header.Set("Authorization", "Basic !!!") }, 401, "invalid_client"},
		{"scope the client lacks", "grant_type=client_credentials&scope=definitions:write", formType, basic(id, secret), 400, "invalid_scope"},
		{"scope that does not exist", "grant_type=client_credentials&scope=admin", formType, basic(id, secret), 400, "invalid_scope"},
		{"wider scope", "grant_type=client_credentials&scope=definitions:read+definitions:write", formType, basic(id, secret), 400, "invalid_scope"},
		// RFC 6749 §3.3: scope-tokens separated by single spaces, nothing else.
		{"scope of spaces only", "grant_type=client_credentials&scope=%20%20%20", formType, basic(id, secret), 400, "invalid_scope"},
		{"scope with a leading space", "grant_type=client_credentials&scope=+definitions:read", formType, basic(id, secret), 400, "invalid_scope"},
		{"scope with a trailing space", "grant_type=client_credentials&scope=definitions:read+", formType, basic(id, secret), 400, "invalid_scope"},
		{"scope with a double space", "grant_type=client_credentials&scope=definitions:read++definitions:read", formType, basic(id, secret), 400, "invalid_scope"},
		{"scope separated by a tab", "grant_type=client_credentials&scope=definitions:read%09definitions:read", formType, basic(id, secret), 400, "invalid_scope"},
		{"scope separated by a newline", "grant_type=client_credentials&scope=definitions:read%0Adefinitions:read", formType, basic(id, secret), 400, "invalid_scope"},
		{"scope ending in a newline", "grant_type=client_credentials&scope=definitions:read%0A", formType, basic(id, secret), 400, "invalid_scope"},
		{"password grant without password", "grant_type=password&username=alice&account_name=acme", formType, nil, 400, "invalid_request"},
		{"password grant without username", "grant_type=password&password=x&account_name=acme", formType, nil, 400, "invalid_request"},
		{"password grant without account", "grant_type=password&username=alice&password=alice-password", formType, nil, 400, "invalid_request"},
		{"password grant, wrong password", "grant_type=password&username=alice&password=nope&account_name=acme", formType, nil, 400, "invalid_grant"},
		{"password grant, unknown account", "grant_type=password&username=alice&password=alice-password&account_name=nope", formType, nil, 400, "invalid_grant"},
		{"password grant, long username", "grant_type=password&password=x&account_name=acme&username=" + strings.Repeat("a", 300), formType, nil, 400, "invalid_request"},
		{"refresh grant without a token", "grant_type=refresh_token", formType, nil, 400, "invalid_request"},
		{"refresh grant with garbage", "grant_type=refresh_token&refresh_token=garbage", formType, nil, 400, "invalid_grant"},
		{"refresh grant with an access token", "grant_type=refresh_token&refresh_token=" + login.AccessToken, formType, nil, 400, "invalid_grant"},
		{"refresh grant with an id token", "grant_type=refresh_token&refresh_token=" + login.IDToken, formType, nil, 400, "invalid_grant"},
		{"JSON body", `{"grant_type":"client_credentials"}`, "application/json", basic(id, secret), 400, "invalid_request"},
		{"no content type", "grant_type=client_credentials", "", basic(id, secret), 400, "invalid_request"},
		{"body over 16 KiB", "grant_type=client_credentials&scope=" + strings.Repeat("a", 17<<10), formType, basic(id, secret), 413, "invalid_request"},
		{"repeated parameter", "grant_type=refresh_token&refresh_token=" + login.RefreshToken + "&refresh_token=" + login.RefreshToken, formType, nil, 400, "invalid_request"},
		{"bad form encoding", "grant_type=client_credentials&scope=%zz", formType, basic(id, secret), 400, "invalid_request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o.postForm(o.tokenEndpoint, tc.body, tc.contentType, tc.edit).oauthError(t, tc.status, tc.code)
		})
	}
	t.Run("parameters in the URL", func(t *testing.T) {
		o.postForm(o.tokenEndpoint+"?client_secret="+secret, "grant_type=client_credentials&client_id="+id, formType, nil).
			oauthError(t, http.StatusBadRequest, "invalid_request")
	})
	// None of that changed anything: the session was neither rotated nor
	// revoked, and the client still works.
	if status, _ := o.refresh(login.RefreshToken); status != http.StatusOK {
		t.Fatalf("session after bad input: %d", status)
	}
	o.clientToken(id, secret)
}

// A refresh token is bound to the client its session was issued to (or to
// none): any other client, of the same or another account, gets
// invalid_grant and changes nothing.
func testRefreshOfAnotherClient(t *testing.T, o *oauthAPI) {
	mineID, mineSecret := o.newClient(o.acme, "definitions:read")
	sameAccountID, sameAccountSecret := o.newClient(o.acme, "definitions:read")
	otherAccountID, otherAccountSecret := o.newClient(o.globex, "definitions:read")
	set := o.postForm(o.tokenEndpoint, "grant_type=password&username=alice&password=alice-password", formType, basic(mineID, mineSecret)).tokens(t)
	login := o.login("acme", "alice", "alice-password") // a session of no client

	for name, tc := range map[string]struct {
		refresh string
		edit    func(*http.Request)
	}{
		"another client of the account":  {set.RefreshToken, basic(sameAccountID, sameAccountSecret)},
		"a client of another account":    {set.RefreshToken, basic(otherAccountID, otherAccountSecret)},
		"no client":                      {set.RefreshToken, nil},
		"a client, for a /login session": {login.RefreshToken, basic(mineID, mineSecret)},
	} {
		t.Run(name, func(t *testing.T) {
			o.postForm(o.tokenEndpoint, "grant_type=refresh_token&refresh_token="+tc.refresh, formType, tc.edit).
				oauthError(t, http.StatusBadRequest, "invalid_grant")
		})
	}
	// /token/refresh and /logout act for no client either.
	if status, _ := o.refresh(set.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("/token/refresh of a client's session: %d", status)
	}
	o.call("POST", "/logout", "", refreshBody(set.RefreshToken)).problem(t, http.StatusUnauthorized, "invalid_token")
	// Nothing changed: both sessions still refresh, each for its own.
	o.postForm(o.tokenEndpoint, "grant_type=refresh_token&refresh_token="+set.RefreshToken, formType, basic(mineID, mineSecret)).tokens(t)
	if status, _ := o.refresh(login.RefreshToken); status != http.StatusOK {
		t.Fatalf("the /login session after the attempts: %d", status)
	}
}

func testRevocation(t *testing.T, o *oauthAPI) {
	id, secret := o.newClient(o.acme, "definitions:read")
	otherID, otherSecret := o.newClient(o.acme, "definitions:read")

	// A session of no client: revoked without client authentication.
	login := o.login("acme", "alice", "alice-password")
	r := o.postForm(o.revokeEndpoint, "token="+login.RefreshToken+"&token_type_hint=refresh_token", formType, nil)
	if r.status != http.StatusOK || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if status, _ := o.refresh(login.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("refresh after revocation: %d", status)
	}
	// Revoking again, an access token, garbage: accepted, nothing happens.
	access := o.login("acme", "alice", "alice-password")
	for _, tok := range []string{login.RefreshToken, access.AccessToken, access.IDToken, "garbage"} {
		if r := o.postForm(o.revokeEndpoint, "token="+tok, formType, nil); r.status != http.StatusOK {
			t.Fatalf("revoke %.20s…: %d %s", tok, r.status, r.body)
		}
	}
	if status, _ := o.refresh(access.RefreshToken); status != http.StatusOK {
		t.Fatalf("revoking its access token ended the session: %d", status)
	}

	// A client's session: only that client revokes it.
	set := o.postForm(o.tokenEndpoint, "grant_type=password&username=alice&password=alice-password", formType, basic(id, secret)).tokens(t)
	for _, edit := range []func(*http.Request){nil, basic(otherID, otherSecret)} {
		if r := o.postForm(o.revokeEndpoint, "token="+set.RefreshToken, formType, edit); r.status != http.StatusOK {
			t.Fatalf("revoke by another: %d %s", r.status, r.body)
		}
	}
	next := o.postForm(o.tokenEndpoint, "grant_type=refresh_token&refresh_token="+set.RefreshToken, formType, basic(id, secret)).tokens(t)
	if r := o.postForm(o.revokeEndpoint, "token="+next.RefreshToken+"&client_id="+id+"&client_secret="+secret, formType, nil); r.status != http.StatusOK {
		t.Fatalf("revoke by its client: %d %s", r.status, r.body)
	}
	o.postForm(o.tokenEndpoint, "grant_type=refresh_token&refresh_token="+next.RefreshToken, formType, basic(id, secret)).
		oauthError(t, http.StatusBadRequest, "invalid_grant")

	// Bad requests.
	fresh := o.login("acme", "alice", "alice-password")
	o.postForm(o.revokeEndpoint, "token_type_hint=refresh_token", formType, nil).oauthError(t, http.StatusBadRequest, "invalid_request")
	o.postForm(o.revokeEndpoint, "token="+fresh.RefreshToken, formType, basic(id, "cs_wrong")).oauthError(t, http.StatusUnauthorized, "invalid_client")
	o.postForm(o.revokeEndpoint, `{"token":"`+fresh.RefreshToken+`"}`, "application/json", nil).oauthError(t, http.StatusBadRequest, "invalid_request")
	o.postForm(o.revokeEndpoint, "token="+strings.Repeat("a", 17<<10), formType, nil).oauthError(t, http.StatusRequestEntityTooLarge, "invalid_request")
	if status, _ := o.refresh(fresh.RefreshToken); status != http.StatusOK {
		t.Fatalf("session after bad revocation requests: %d", status)
	}
}

// Credentials given twice never authenticate, on every authenticated route.
func testAmbiguousCredentials(t *testing.T, o *oauthAPI) {
	id, secret := o.newClient(o.acme, "definitions:read", "definitions:write")
	login := o.login("acme", "alice", "alice-password")
	var before []definition
	o.call("GET", "/definitions", login.AccessToken, "").json(t, &before)
	twoHeaders := func(values ...string) func(*http.Request) {
		return func(r *http.Request) { r.Header["Authorization"] = values }
	}
	basicValue := "Basic " + base64.StdEncoding.EncodeToString([]byte(id+":"+secret))

	t.Run("token endpoint", func(t *testing.T) {
		for name, tc := range map[string]struct {
			body string
			edit func(*http.Request)
		}{
			"basic and client_id":        {"grant_type=client_credentials&client_id=" + id, basic(id, secret)},
			"basic and client_secret":    {"grant_type=client_credentials&client_secret=" + secret, basic(id, secret)},
			"basic and both form fields": {"grant_type=client_credentials&client_id=" + id + "&client_secret=" + secret, basic(id, secret)},
			"two basic headers":          {"grant_type=client_credentials", twoHeaders(basicValue, basicValue)},
			"basic and bearer":           {"grant_type=client_credentials", twoHeaders(basicValue, "Bearer "+login.AccessToken)},
		} {
			t.Run(name, func(t *testing.T) {
				o.postForm(o.tokenEndpoint, tc.body, formType, tc.edit).oauthError(t, http.StatusBadRequest, "invalid_request")
			})
		}
		o.postForm(o.revokeEndpoint, "token="+login.RefreshToken+"&client_id="+id, formType, basic(id, secret)).
			oauthError(t, http.StatusBadRequest, "invalid_request")
	})
	t.Run("bearer routes", func(t *testing.T) {
		for _, route := range []struct{ method, path, body string }{
			{"GET", "/definitions", ""},
			{"POST", "/definitions", `{"name":"n","type":"x"}`},
			{"GET", "/definitions/def_x", ""},
			{"PUT", "/definitions/def_x", `{"name":"n","type":"x"}`},
			{"DELETE", "/definitions/def_x", ""},
		} {
			bearer := "Bearer " + login.AccessToken
			r := o.postLike(route.method, route.path, route.body, twoHeaders(bearer, bearer))
			r.problem(t, http.StatusBadRequest, "invalid_request")
		}
	})
	t.Run("login, refresh and logout", func(t *testing.T) {
		bearer := "Bearer " + login.AccessToken
		for path, body := range map[string]string{
			"/login":         loginBody("acme", "alice", "alice-password"),
			"/token/refresh": refreshBody(login.RefreshToken),
			"/logout":        refreshBody(login.RefreshToken),
		} {
			o.postLike("POST", path, body, twoHeaders(bearer, bearer)).problem(t, http.StatusBadRequest, "invalid_request")
		}
	})
	// Nothing was created, and the session is as it was.
	var list []definition
	o.call("GET", "/definitions", login.AccessToken, "").json(t, &list)
	if len(list) != len(before) {
		t.Fatalf("ambiguous requests changed the definitions from %+v to %+v", before, list)
	}
	if status, _ := o.refresh(login.RefreshToken); status != http.StatusOK {
		t.Fatalf("session after ambiguous requests: %d", status)
	}
}

// postLike sends a JSON request with edited headers; only the response is
// validated.
func (o *oauthAPI) postLike(method, path, body string, edit func(*http.Request)) response {
	o.t.Helper()
	req := o.request(method, path, body, "application/json")
	edit(req)
	return o.exchange(req, false)
}

// sid returns the session of a token set's id token.
func (o *oauthAPI) sid(t *testing.T, idToken string) string {
	t.Helper()
	c, err := o.verifier.Verify(context.Background(), idToken)
	if err != nil {
		t.Fatal(err)
	}
	return c.SessionID
}

// A client whose refresh response was lost retries with the same token
// within the grace window: it gets a valid token set of the same session,
// and the session goes on.
func testRefreshRetryWithinGrace(t *testing.T, o *oauthAPI) {
	set := o.login("acme", "alice", "alice-password")
	sid := o.sid(t, set.IDToken)
	status, lost := o.refresh(set.RefreshToken)
	if status != http.StatusOK {
		t.Fatalf("first exchange: %d", status)
	}
	o.clock.Advance(9 * time.Second)
	status, retried := o.refresh(set.RefreshToken)
	if status != http.StatusOK {
		t.Fatalf("retry within the grace window: %d", status)
	}
	if o.sid(t, retried.IDToken) != sid || retried.AccessToken == lost.AccessToken {
		t.Fatal("the retry did not get a new token set of the same session")
	}
	if r := o.call("GET", "/definitions", retried.AccessToken, ""); r.status != http.StatusOK {
		t.Fatalf("the retry's access token: %d", r.status)
	}
	// The session goes on from the retry's refresh token.
	status, next := o.refresh(retried.RefreshToken)
	if status != http.StatusOK || o.sid(t, next.IDToken) != sid {
		t.Fatalf("refresh after the retry: %d", status)
	}
	if status, _ := o.refresh(next.RefreshToken); status != http.StatusOK {
		t.Fatalf("the session after a retry: %d", status)
	}
}

// Replaying a spent refresh token after the window is reuse: refused, and
// the session ends.
func testRefreshReplayAfterGrace(t *testing.T, o *oauthAPI) {
	set := o.login("acme", "alice", "alice-password")
	status, current := o.refresh(set.RefreshToken)
	if status != http.StatusOK {
		t.Fatalf("first exchange: %d", status)
	}
	o.clock.Advance(10 * time.Second)
	if status, _ := o.refresh(set.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("replay after the grace window: %d, want 401", status)
	}
	if status, _ := o.refresh(current.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("the owner's current token after reuse: %d, want 401", status)
	}
}

// Within the window, only the token spent last is a retry: an older one is
// reuse.
func testRefreshOlderTokenWithinGrace(t *testing.T, o *oauthAPI) {
	first := o.login("acme", "alice", "alice-password")
	_, second := o.refresh(first.RefreshToken)
	status, third := o.refresh(second.RefreshToken)
	if status != http.StatusOK {
		t.Fatalf("second exchange: %d", status)
	}
	if status, _ := o.refresh(first.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("a token two exchanges old: %d, want 401", status)
	}
	if status, _ := o.refresh(third.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("the session after reuse of an old token: %d, want 401", status)
	}
}

// Concurrent exchanges of one token (a client that retried before the
// first response arrived) all succeed within the window, with one session,
// and every refresh token they return continues it.
func testConcurrentRefreshWithinGrace(t *testing.T, o *oauthAPI) {
	for round := range 3 {
		set := o.login("acme", "alice", "alice-password")
		sid := o.sid(t, set.IDToken)
		const racers = 8
		results := make([]response, racers)
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				resp, err := o.srv.Client().Post(o.srv.URL+"/token/refresh", "application/json", strings.NewReader(refreshBody(set.RefreshToken)))
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				results[i] = response{status: resp.StatusCode, header: resp.Header, body: body}
			})
		}
		wg.Wait()
		var refreshTokens []string
		for i, r := range results {
			if r.status != http.StatusOK {
				t.Fatalf("round %d, racer %d: %d %s; want every one 200 within the grace window", round, i, r.status, r.body)
			}
			var out struct{ Tokens token.Set }
			r.json(t, &out)
			if o.sid(t, out.Tokens.IDToken) != sid {
				t.Fatalf("round %d: a racer got another session", round)
			}
			refreshTokens = append(refreshTokens, out.Tokens.RefreshToken)
		}
		// Any of the returned refresh tokens continues the session.
		status, next := o.refresh(refreshTokens[round%racers])
		if status != http.StatusOK || o.sid(t, next.IDToken) != sid {
			t.Fatalf("round %d: refresh with a racer's token: %d", round, status)
		}
		if status, _ := o.refresh(next.RefreshToken); status != http.StatusOK {
			t.Fatalf("round %d: the session after the race: %d", round, status)
		}
	}
}

// The grace applies to the refresh_token grant alike.
func testRefreshGrantRetry(t *testing.T, o *oauthAPI) {
	set := o.login("acme", "alice", "alice-password")
	body := "grant_type=refresh_token&refresh_token=" + set.RefreshToken
	first := o.postForm(o.tokenEndpoint, body, formType, nil).tokens(t)
	retried := o.postForm(o.tokenEndpoint, body, formType, nil).tokens(t)
	if o.sid(t, first.IDToken) != o.sid(t, retried.IDToken) {
		t.Fatal("the retry got another session")
	}
	o.clock.Advance(11 * time.Second)
	o.postForm(o.tokenEndpoint, body, formType, nil).oauthError(t, http.StatusBadRequest, "invalid_grant")
	o.postForm(o.tokenEndpoint, "grant_type=refresh_token&refresh_token="+retried.RefreshToken, formType, nil).
		oauthError(t, http.StatusBadRequest, "invalid_grant")
}

// Failed client authentications are throttled like logins: after 5, the
// client id is refused with slow_down and Retry-After, whatever the secret,
// on both endpoints.
func testClientThrottle(t *testing.T, o *oauthAPI) {
	id, secret := o.newClient(o.acme, "definitions:read")
	for range 5 {
		o.postForm(o.tokenEndpoint, "grant_type=client_credentials", formType, basic(id, "cs_guess")).
			oauthError(t, http.StatusUnauthorized, "invalid_client")
	}
	for _, endpoint := range []struct{ url, body string }{
		{o.tokenEndpoint, "grant_type=client_credentials"},
		{o.revokeEndpoint, "token=x"},
	} {
		r := o.postForm(endpoint.url, endpoint.body, formType, basic(id, secret))
		r.oauthError(t, http.StatusTooManyRequests, "slow_down")
		if r.header.Get("Retry-After") == "" {
			t.Errorf("%s: 429 without Retry-After", endpoint.url)
		}
	}
	// The lock ends with its time.
	o.clock.Advance(time.Hour + time.Second)
	o.clientToken(id, secret)
}

// The password grant counts failures like POST /login: the user is locked
// after 5, also for the right password.
func testPasswordGrantThrottle(t *testing.T, o *oauthAPI) {
	const wrong = "grant_type=password&username=mallory&password=wrong&account_name=acme"
	for range 5 {
		o.postForm(o.tokenEndpoint, wrong, formType, nil).oauthError(t, http.StatusBadRequest, "invalid_grant")
	}
	r := o.postForm(o.tokenEndpoint, "grant_type=password&username=mallory&password=mallory-password&account_name=acme", formType, nil)
	r.oauthError(t, http.StatusTooManyRequests, "slow_down")
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// POST /login shares the counter.
	o.callInvalid("POST", "/login", "", loginBody("acme", "mallory", "mallory-password"), "application/json").
		problem(t, http.StatusTooManyRequests, "too_many_requests")
}
