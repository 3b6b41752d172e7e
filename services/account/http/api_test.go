package http_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/testkit/openapitest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
	"github.com/acme/platform/pkg/tracing/tracingtest"
	"github.com/acme/platform/pkg/validation"
	accounthttp "github.com/acme/platform/services/account/http"
	"github.com/acme/platform/services/account/mongostore"
)

// spanSecrets are the credentials the suite's requests carry: no span
// of the suite may hold one (tracingtest.Checked).
var spanSecrets tracingtest.Secrets

func TestMain(m *testing.M) {
	mongotest.Main(tracingtest.Checked(m, tracingtest.Install(), &spanSecrets))
}

const (
	issuerURL = "http://account.test"
	audience  = "acme-platform"
)

// api is a running account service on a fresh database, with every
// exchange validated against the OpenAPI document.
type api struct {
	t        *testing.T
	srv      *httptest.Server
	doc      *openapitest.Validator
	store    *mongostore.Store
	keys     *token.Keyring
	verifier *token.Verifier
}

func newAPI(t *testing.T) *api {
	t.Helper()
	ctx := context.Background()
	store := newStore(t)
	hasher := cheapHasher(t)
	kit := newTokenKit(t, "RS256")
	srv := httptest.NewServer(spanSecrets.Handler(accounthttp.NewHandler(kit.withAuthz(store, accounthttp.Deps{
		Sessions:    kit.sessions(store, hasher, nil),
		Definitions: store,
		Verifier:    kit.verifier,
		Keys:        kit.keys,
		IssuerURL:   issuerURL,
	}))))
	t.Cleanup(srv.Close)

	a := &api{t: t, srv: srv, doc: openapitest.Load(t, accounthttp.OpenAPI), store: store, keys: kit.ring, verifier: kit.verifier}
	for _, u := range []struct{ acc, user, pw string }{
		{"acme", "alice", "alice-password"},
		{"acme", "mallory", "mallory-password"},
		{"globex", "bob", "bob-password"},
		{"empty", "eve", "eve-password"},
	} {
		acc, err := store.AccountByName(ctx, u.acc)
		if err != nil {
			acc, err = store.CreateAccount(ctx, u.acc)
			if err != nil {
				t.Fatal(err)
			}
		}
		addUser(t, store, hasher, acc.ID, u.user, u.pw)
	}
	return a
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// problem decodes a problem+json body and checks its shape.
func (r response) problem(t *testing.T, status int, code string) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var p map[string]any
	r.json(t, &p)
	if p["code"] != code || p["status"] != float64(status) || p["title"] == "" || p["type"] == "" {
		t.Fatalf("problem = %v, want code %q status %d", p, code, status)
	}
	return p
}

// call sends a request whose every part is valid per the document.
func (a *api) call(method, path, bearer, body string) response {
	return a.send(method, path, bearer, body, "application/json", true)
}

// callInvalid sends a deliberately invalid request; only the response is
// validated against the document.
func (a *api) callInvalid(method, path, bearer, body, contentType string) response {
	return a.send(method, path, bearer, body, contentType, false)
}

func (a *api) send(method, path, bearer, body, contentType string, validRequest bool) response {
	a.t.Helper()
	req := a.request(method, path, body, contentType)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return a.exchange(req, validRequest)
}

// request is a request to the test server, with body (none when empty)
// of contentType (no header when empty).
func (a *api) request(method, path, body, contentType string) *http.Request {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.srv.URL+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if body != "" && contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}

// exchange sends req, validating the exchange against the OpenAPI
// document (only the response unless validRequest).
func (a *api) exchange(req *http.Request, validRequest bool) response {
	a.t.Helper()
	var resp *http.Response
	var respBody []byte
	if validRequest {
		resp, respBody = a.doc.Do(a.t, a.srv.Client(), req)
	} else {
		resp, respBody = a.doc.DoResponseOnly(a.t, a.srv.Client(), req)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: respBody}
}

func (a *api) login(accountName, username, pw string) token.Set {
	a.t.Helper()
	r := a.call("POST", "/login", "", loginBody(accountName, username, pw))
	if r.status != http.StatusOK {
		a.t.Fatalf("login %s/%s: %d %s", accountName, username, r.status, r.body)
	}
	var out struct{ Tokens token.Set }
	r.json(a.t, &out)
	return out.Tokens
}

func loginBody(accountName, username, pw string) string {
	b, _ := json.Marshal(map[string]string{"accountName": accountName, "username": username, "password": pw})
	return string(b)
}

func TestAPI(t *testing.T) {
	t.Parallel()
	a := newAPI(t)

	t.Run("LoginReturnsTokenSet", func(t *testing.T) { testLogin(t, a) })
	t.Run("LoginFailuresAreIndistinguishable", func(t *testing.T) { testLoginFailures(t, a) })
	t.Run("LoginBadInput", func(t *testing.T) { testLoginBadInput(t, a) })
	t.Run("Bearer", func(t *testing.T) { testBearer(t, a) })
	t.Run("DefinitionsLifecycle", func(t *testing.T) { testDefinitions(t, a) })
	t.Run("DefinitionsAreScopedByAccount", func(t *testing.T) { testDefinitionIsolation(t, a) })
	t.Run("DefinitionBadInput", func(t *testing.T) { testDefinitionBadInput(t, a) })
	t.Run("WellKnown", func(t *testing.T) { testWellKnown(t, a) })
	t.Run("Refresh", func(t *testing.T) { testRefresh(t, a) })
	t.Run("RefreshReuseRevokesTheSession", func(t *testing.T) { testRefreshReuse(t, a) })
	t.Run("ConcurrentRefreshHasOneWinner", func(t *testing.T) { testConcurrentRefresh(t, a) })
	t.Run("Logout", func(t *testing.T) { testLogout(t, a) })
	t.Run("RefreshOfDisabledUser", func(t *testing.T) { testRefreshDisabledUser(t, a) })
	t.Run("RefreshBadInput", func(t *testing.T) { testRefreshBadInput(t, a) })
	t.Run("UnknownRouteAndMethod", func(t *testing.T) { testUnknownRoute(t, a) })

	// 503 needs a database outage; it is exercised where MongoDB is stopped.
	// The OAuth 2.0 endpoints, service clients' scopes and ambiguous
	// credentials are covered by TestOAuth.
	a.doc.AssertAllOperationsCovered(t, "* * 503", "* * 429", "* * 413", "* * 415",
		"* /oauth2/* *", "GET /oauth2/assets/signin.css 200", "* * 403", "GET * 400", "DELETE * 400", "* /users *", "* /users/* *", "* /users/*/password *", "* /userinfo *", "* /password *", "* /mfa/* *", "* /mfa/*/* *", "* /users/*/mfa *")
}

func testLogin(t *testing.T, a *api) {
	r := a.call("POST", "/login", "", loginBody("ACME", "Alice", "alice-password"))
	if r.status != http.StatusOK {
		t.Fatalf("login: %d %s", r.status, r.body)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", cc)
	}
	var out struct{ Tokens token.Set }
	r.json(t, &out)
	set := out.Tokens
	if set.AccessToken == "" || set.RefreshToken == "" || set.IDToken == "" || set.ExpiresIn != 3600 {
		t.Fatalf("token set = %+v", set)
	}
	ctx := context.Background()
	id, err := a.verifier.Verify(ctx, set.IDToken)
	if err != nil {
		t.Fatalf("id token does not verify: %v", err)
	}
	if id.Use != token.UseID || id.AccountName != "acme" || id.PreferredUsername != "alice" ||
		id.Issuer != issuerURL || id.Subject == "" || id.AccountID == "" || id.AuthTime.IsZero() {
		t.Errorf("id token claims = %+v", id)
	}
	if got := id.Expiry.Sub(id.IssuedAt); got != time.Hour {
		t.Errorf("id token lifetime = %s, want 1h (expires_in)", got)
	}
	access, err := a.verifier.Verify(ctx, set.AccessToken)
	if err != nil || access.Use != token.UseAccess || access.Type != "at+jwt" || access.Subject != id.Subject {
		t.Errorf("access token = %+v, %v", access, err)
	}
	if _, err := a.verifier.Verify(ctx, set.RefreshToken); err == nil {
		t.Error("a refresh token verified as a bearer")
	}
}

func testLoginFailures(t *testing.T, a *api) {
	ctx := context.Background()
	acme, _ := a.store.AccountByName(ctx, "acme")
	setUserDisabled(t, a.store, acme.ID, "mallory", true)
	cases := map[string]string{
		"unknown account":         loginBody("nope", "alice", "alice-password"),
		"unknown user":            loginBody("acme", "nobody", "alice-password"),
		"wrong password":          loginBody("acme", "alice", "Alice-password"),
		"user of another account": loginBody("globex", "alice", "alice-password"),
		"disabled user":           loginBody("acme", "mallory", "mallory-password"),
	}
	var first []byte
	for name, body := range cases {
		r := a.call("POST", "/login", "", body)
		r.problem(t, http.StatusUnauthorized, "invalid_credentials")
		if first == nil {
			first = r.body
		} else if string(r.body) != string(first) {
			t.Errorf("%s: body %s differs from %s", name, r.body, first)
		}
	}
}

func testLoginBadInput(t *testing.T, a *api) {
	cases := []struct {
		name, body, contentType string
		status                  int
		code, field             string
	}{
		{"operator injection", `{"username":{"$ne":null},"password":"x","accountName":"acme"}`, "application/json", 400, "validation_failed", "username"},
		{"array password", `{"username":"alice","password":["a"],"accountName":"acme"}`, "application/json", 400, "validation_failed", "password"},
		{"number account", `{"username":"alice","password":"x","accountName":7}`, "application/json", 400, "validation_failed", "accountName"},
		{"missing fields", `{"username":"alice"}`, "application/json", 400, "validation_failed", "password"},
		{"empty object", `{}`, "application/json", 400, "validation_failed", "accountName"},
		{"malformed", `{"username":`, "application/json", 400, "malformed_json", ""},
		{"not an object", `["alice"]`, "application/json", 400, "malformed_json", ""},
		{"null body", `null`, "application/json", 400, "malformed_json", ""},
		{"string body", ` "alice"`, "application/json", 400, "malformed_json", ""},
		{"number body", `7`, "application/json", 400, "malformed_json", ""},
		{"two values", `{"username":"a","password":"b","accountName":"c"} {}`, "application/json", 400, "malformed_json", ""},
		{"form body", `username=alice`, "application/x-www-form-urlencoded", 415, "unsupported_media_type", ""},
		{"no content type", `{}`, "", 415, "unsupported_media_type", ""},
		{"too large", `{"username":"` + strings.Repeat("a", 17<<10) + `"}`, "application/json", 413, "body_too_large", ""},
		{"too long username", loginBody("acme", strings.Repeat("a", 300), "x"), "application/json", 400, "validation_failed", "username"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := a.callInvalid("POST", "/login", "", tc.body, tc.contentType)
			p := r.problem(t, tc.status, tc.code)
			if tc.field == "" {
				return
			}
			errs, _ := p["errors"].([]any)
			for _, e := range errs {
				if e.(map[string]any)["field"] == tc.field {
					return
				}
			}
			t.Errorf("errors %v do not name %q", p["errors"], tc.field)
		})
	}
}

func testBearer(t *testing.T, a *api) {
	set := a.login("acme", "alice", "alice-password")
	if r := a.call("GET", "/definitions", set.IDToken, ""); r.status != http.StatusOK {
		t.Errorf("id token: %d %s", r.status, r.body)
	}
	if r := a.call("GET", "/definitions", set.AccessToken, ""); r.status != http.StatusOK {
		t.Errorf("access token: %d %s", r.status, r.body)
	}

	// A token of a key this service does not publish.
	forged := tokentest.StrangerOf(t, token.AlgRS256, issuerURL, []string{audience}, token.Subject{UserID: "usr_x", AccountID: "acc_x"}, a.keys)

	for name, bearer := range map[string]string{
		"refresh token": set.RefreshToken,
		"garbage":       "not-a-jwt",
		"truncated":     set.IDToken[:len(set.IDToken)-10],
		"foreign key":   forged.IDToken,
	} {
		r := a.callInvalid("GET", "/definitions", bearer, "", "")
		r.problem(t, http.StatusUnauthorized, "invalid_token")
		if got := r.header.Get("WWW-Authenticate"); got != `Bearer error="invalid_token"` {
			t.Errorf("%s: WWW-Authenticate = %q", name, got)
		}
	}
	for _, route := range []struct{ method, path, body string }{
		{"GET", "/definitions", ""},
		{"POST", "/definitions", `{"name":"n","type":"x"}`},
		{"GET", "/definitions/def_x", ""},
		{"PUT", "/definitions/def_x", `{"name":"n","type":"x"}`},
		{"DELETE", "/definitions/def_x", ""},
	} {
		r := a.callInvalid(route.method, route.path, "", route.body, "application/json")
		r.problem(t, http.StatusUnauthorized, "invalid_token")
		if r.header.Get("WWW-Authenticate") != `Bearer error="invalid_token"` {
			t.Errorf("%s %s without bearer: WWW-Authenticate = %q", route.method, route.path, r.header.Get("WWW-Authenticate"))
		}
	}
}

type definition struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Type      string          `json:"type"`
	Config    json.RawMessage `json:"config"`
	Enabled   bool            `json:"enabled"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

func testDefinitions(t *testing.T, a *api) {
	empty := a.login("empty", "eve", "eve-password")
	r := a.call("GET", "/definitions", empty.IDToken, "")
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("no definitions: %d %q, want 200 []", r.status, r.body)
	}

	bob := a.login("globex", "bob", "bob-password").IDToken
	r = a.call("POST", "/definitions", bob, `{"name":"CRM","type":"salesforce","config":{"url":"https://x.test","n":12345678901234567890}}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created definition
	r.json(t, &created)
	if r.header.Get("Location") != "/definitions/"+created.ID || !created.Enabled ||
		string(created.Config) != `{"url":"https://x.test","n":12345678901234567890}` {
		t.Fatalf("created %+v, Location %q", created, r.header.Get("Location"))
	}
	time.Sleep(2 * time.Millisecond) // distinct createdAt, so the order is by creation
	a.call("POST", "/definitions", bob, `{"name":"Tickets","type":"zendesk","enabled":false}`)

	var list []definition
	a.call("GET", "/definitions", bob, "").json(t, &list)
	if len(list) != 2 || list[0].ID != created.ID || list[1].Name != "Tickets" || list[1].Enabled || string(list[1].Config) != "{}" {
		t.Fatalf("list = %+v", list)
	}

	var got definition
	a.call("GET", "/definitions/"+created.ID, bob, "").json(t, &got)
	if got.ID != created.ID || got.Name != "CRM" {
		t.Fatalf("get = %+v", got)
	}
	r = a.call("PUT", "/definitions/"+created.ID, bob, `{"name":"CRM v2","type":"salesforce","enabled":false}`)
	var replaced definition
	r.json(t, &replaced)
	if r.status != http.StatusOK || replaced.Name != "CRM v2" || replaced.Enabled || string(replaced.Config) != "{}" ||
		!replaced.CreatedAt.Equal(created.CreatedAt) {
		t.Fatalf("replace: %d %+v", r.status, replaced)
	}
	if r := a.call("DELETE", "/definitions/"+created.ID, bob, ""); r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	a.call("GET", "/definitions/"+created.ID, bob, "").problem(t, http.StatusNotFound, "not_found")
	a.call("DELETE", "/definitions/"+created.ID, bob, "").problem(t, http.StatusNotFound, "not_found")
	a.call("PUT", "/definitions/def_nope", bob, `{"name":"x","type":"y"}`).problem(t, http.StatusNotFound, "not_found")
}

func testDefinitionIsolation(t *testing.T, a *api) {
	alice := a.login("acme", "alice", "alice-password").IDToken
	bob := a.login("globex", "bob", "bob-password").IDToken
	var mine definition
	a.call("POST", "/definitions", alice, `{"name":"Secret","type":"hubspot","config":{"apiKey":"k"}}`).json(t, &mine)

	a.call("GET", "/definitions/"+mine.ID, bob, "").problem(t, http.StatusNotFound, "not_found")
	a.call("PUT", "/definitions/"+mine.ID, bob, `{"name":"Stolen","type":"hubspot"}`).problem(t, http.StatusNotFound, "not_found")
	a.call("DELETE", "/definitions/"+mine.ID, bob, "").problem(t, http.StatusNotFound, "not_found")
	var bobs []definition
	a.call("GET", "/definitions", bob, "").json(t, &bobs)
	for _, d := range bobs {
		if d.ID == mine.ID {
			t.Fatal("another account's definition is listed")
		}
	}
	var still definition
	a.call("GET", "/definitions/"+mine.ID, alice, "").json(t, &still)
	if still.Name != "Secret" {
		t.Fatalf("owner's definition changed: %+v", still)
	}
}

func testDefinitionBadInput(t *testing.T, a *api) {
	eve := a.login("empty", "eve", "eve-password").IDToken
	cases := []struct {
		name, body string
		status     int
		code       string
	}{
		{"missing name", `{"type":"x"}`, 400, "validation_failed"},
		{"bad type", `{"name":"n","type":"Sales Force"}`, 400, "validation_failed"},
		{"config array", `{"name":"n","type":"x","config":[1]}`, 400, "validation_failed"},
		{"config string", `{"name":"n","type":"x","config":"{}"}`, 400, "validation_failed"},
		{"name object", `{"name":{"$gt":""},"type":"x"}`, 400, "validation_failed"},
		{"long name", `{"name":"` + strings.Repeat("n", 201) + `","type":"x"}`, 400, "validation_failed"},
		{"config over 64 KiB", `{"name":"n","type":"x","config":{"a":"` + strings.Repeat("x", 65<<10) + `"}}`, 400, "validation_failed"},
		{"body over 128 KiB", `{"name":"n","type":"x","config":{"a":"` + strings.Repeat("x", 130<<10) + `"}}`, 413, "body_too_large"},
		{"malformed", `{"name":`, 400, "malformed_json"},
		{"null body", `null`, 400, "malformed_json"},
		{"array body", `[{"name":"n","type":"x"}]`, 400, "malformed_json"},
		{"config nested 33 deep", `{"name":"n","type":"x","config":` + nestedJSON(validation.MaxJSONDepth+1) + `}`, 400, "validation_failed"},
		{"config nested 9990 deep", `{"name":"n","type":"x","config":` + nestedJSON(9990) + `}`, 400, "validation_failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a.callInvalid("POST", "/definitions", eve, tc.body, "application/json").problem(t, tc.status, tc.code)
		})
	}
	t.Run("too deep a config is named", func(t *testing.T) {
		p := a.callInvalid("POST", "/definitions", eve, `{"name":"n","type":"x","config":`+nestedJSON(33)+`}`, "application/json").
			problem(t, 400, "validation_failed")
		if errs, _ := p["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["field"] != "config" {
			t.Fatalf("errors = %v, want one naming config", p["errors"])
		}
	})
	// Ids of another form than the store makes name nothing: 404, and
	// the store is never asked (nor written by PUT).
	for _, id := range []string{"%FF%FE", "a%00b", "%24ne", "def_nope", "DEF_00000000000000000000000a", "def_00000000000000000000000A", "def_00000000000000000000000"} {
		a.callInvalid("GET", "/definitions/"+id, eve, "", "").problem(t, 404, "not_found")
		a.callInvalid("PUT", "/definitions/"+id, eve, `{"name":"n","type":"x"}`, "application/json").problem(t, 404, "not_found")
		a.callInvalid("DELETE", "/definitions/"+id, eve, "", "").problem(t, 404, "not_found")
	}
	a.callInvalid("POST", "/definitions", eve, `{"name":"n","type":"x"}`, "text/plain").problem(t, 415, "unsupported_media_type")
	var d definition
	a.call("POST", "/definitions", eve, `{"name":"n","type":"x"}`).json(t, &d)
	a.callInvalid("PUT", "/definitions/"+d.ID, eve, `null`, "application/json").problem(t, 400, "malformed_json")
	a.callInvalid("PUT", "/definitions/"+d.ID, eve, `{"name":"n","type":"x","config":`+nestedJSON(33)+`}`, "application/json").
		problem(t, 400, "validation_failed")
	var deepest definition
	a.call("POST", "/definitions", eve, `{"name":"n","type":"x","config":`+nestedJSON(validation.MaxJSONDepth)+`}`).json(t, &deepest)
	if validation.JSONDepth(deepest.Config) != validation.MaxJSONDepth {
		t.Fatalf("config at the depth limit came back as %s", deepest.Config)
	}
	a.call("DELETE", "/definitions/"+deepest.ID, eve, "")
	a.callInvalid("PUT", "/definitions/"+d.ID, eve, `{"name":"","type":"x"}`, "application/json").problem(t, 400, "validation_failed")
	a.call("DELETE", "/definitions/"+d.ID, eve, "")
	r := a.call("GET", "/definitions", eve, "")
	if strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("bad inputs changed state: %s", r.body)
	}
}

// nestedJSON is a JSON object nested depth levels deep: {"a":{"a":...{}}}.
func nestedJSON(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

func testWellKnown(t *testing.T, a *api) {
	var jwks struct {
		Keys []map[string]any `json:"keys"`
	}
	r := a.call("GET", "/.well-known/jwks.json", "", "")
	r.json(t, &jwks)
	if len(jwks.Keys) != 1 || jwks.Keys[0]["kid"] != a.keys.KeyID() || jwks.Keys[0]["alg"] != "RS256" {
		t.Fatalf("jwks = %v", jwks)
	}
	for _, private := range []string{"d", "p", "q", "dp", "dq", "qi"} {
		if _, ok := jwks.Keys[0][private]; ok {
			t.Fatalf("JWKS publishes private member %q", private)
		}
	}
	var disc map[string]any
	a.call("GET", "/.well-known/openid-configuration", "", "").json(t, &disc)
	if disc["issuer"] != issuerURL || disc["jwks_uri"] != issuerURL+"/.well-known/jwks.json" {
		t.Fatalf("discovery = %v", disc)
	}
	r = a.call("GET", "/openapi.yaml", "", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "openapi: 3.1") {
		t.Fatalf("openapi.yaml: %d", r.status)
	}
}

func testUnknownRoute(t *testing.T, a *api) {
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/nope", 404, "not_found"},
		{"DELETE", "/login", 405, "method_not_allowed"},
		{"PATCH", "/definitions", 405, "method_not_allowed"},
		{"POST", "/.well-known/jwks.json", 405, "method_not_allowed"},
	} {
		req, _ := http.NewRequest(tc.method, a.srv.URL+tc.path, nil)
		resp, err := a.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		response{status: resp.StatusCode, header: resp.Header, body: body}.problem(t, tc.status, tc.code)
	}
}

func refreshBody(rt string) string { return `{"refresh_token":"` + rt + `"}` }

// refresh exchanges rt and returns the status and, on 200, the new set.
func (a *api) refresh(rt string) (int, token.Set) {
	a.t.Helper()
	r := a.call("POST", "/token/refresh", "", refreshBody(rt))
	var out struct{ Tokens token.Set }
	if r.status == http.StatusOK {
		r.json(a.t, &out)
		if r.header.Get("Cache-Control") != "no-store" {
			a.t.Errorf("refresh: Cache-Control = %q", r.header.Get("Cache-Control"))
		}
	} else {
		r.problem(a.t, http.StatusUnauthorized, "invalid_token")
	}
	return r.status, out.Tokens
}

func testRefresh(t *testing.T, a *api) {
	first := a.login("acme", "alice", "alice-password")
	status, second := a.refresh(first.RefreshToken)
	if status != http.StatusOK || second.RefreshToken == first.RefreshToken || second.IDToken == "" {
		t.Fatalf("refresh: %d", status)
	}
	ctx := context.Background()
	c1, _ := a.verifier.Verify(ctx, first.IDToken)
	c2, err := a.verifier.Verify(ctx, second.IDToken)
	if err != nil || c2.SessionID != c1.SessionID || c2.Subject != c1.Subject || !c2.AuthTime.Equal(c1.AuthTime) ||
		c2.PreferredUsername != "alice" {
		t.Fatalf("refreshed id token = %+v, %v; want the same session, user and auth_time as %+v", c2, err, c1)
	}
	if r := a.call("GET", "/definitions", second.AccessToken, ""); r.status != http.StatusOK {
		t.Fatalf("refreshed access token: %d", r.status)
	}
	// The new refresh token can be exchanged in turn.
	if status, _ := a.refresh(second.RefreshToken); status != http.StatusOK {
		t.Fatalf("second refresh: %d", status)
	}
}

func testRefreshReuse(t *testing.T, a *api) {
	set := a.login("acme", "alice", "alice-password")
	_, owner := a.refresh(set.RefreshToken)
	// A thief replays the first refresh token: refused, and the session ends.
	if status, _ := a.refresh(set.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("replayed refresh token: %d", status)
	}
	// The owner's current refresh token is now dead too.
	if status, _ := a.refresh(owner.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("owner's refresh after reuse: %d, want 401", status)
	}
	// Other sessions of the same user are untouched.
	other := a.login("acme", "alice", "alice-password")
	if status, _ := a.refresh(other.RefreshToken); status != http.StatusOK {
		t.Fatalf("another session: %d", status)
	}
}

func testConcurrentRefresh(t *testing.T, a *api) {
	for round := range 3 {
		set := a.login("acme", "alice", "alice-password")
		const racers = 8
		statuses := make(chan int, racers)
		var wg sync.WaitGroup
		for range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := a.srv.Client().Post(a.srv.URL+"/token/refresh", "application/json", strings.NewReader(refreshBody(set.RefreshToken)))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				statuses <- resp.StatusCode
			}()
		}
		wg.Wait()
		close(statuses)
		counts := map[int]int{}
		for s := range statuses {
			counts[s]++
		}
		if counts[200] != 1 || counts[401] != racers-1 {
			t.Fatalf("round %d: statuses %v; want exactly one 200 and %d 401", round, counts, racers-1)
		}
	}
}

func testLogout(t *testing.T, a *api) {
	set := a.login("acme", "alice", "alice-password")
	for range 2 { // idempotent
		if r := a.call("POST", "/logout", "", refreshBody(set.RefreshToken)); r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("logout: %d %s", r.status, r.body)
		}
	}
	if status, _ := a.refresh(set.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("refresh after logout: %d", status)
	}
	// Logging out one session leaves the others alone.
	other := a.login("acme", "alice", "alice-password")
	if status, _ := a.refresh(other.RefreshToken); status != http.StatusOK {
		t.Fatalf("other session after logout: %d", status)
	}
}

func testRefreshDisabledUser(t *testing.T, a *api) {
	ctx := context.Background()
	globex, _ := a.store.AccountByName(ctx, "globex")
	set := a.login("globex", "bob", "bob-password")
	setUserDisabled(t, a.store, globex.ID, "bob", true)
	defer setUserDisabled(t, a.store, globex.ID, "bob", false)
	if status, _ := a.refresh(set.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("refresh of a disabled user: %d", status)
	}
	// Re-enabling does not bring the ended session back.
	setUserDisabled(t, a.store, globex.ID, "bob", false)
	if status, _ := a.refresh(set.RefreshToken); status != http.StatusUnauthorized {
		t.Fatalf("refresh after re-enabling: %d", status)
	}
}

func testRefreshBadInput(t *testing.T, a *api) {
	set := a.login("acme", "alice", "alice-password")
	for _, path := range []string{"/token/refresh", "/logout"} {
		for name, tc := range map[string]struct {
			body, contentType string
			status            int
			code              string
		}{
			"access token": {refreshBody(set.AccessToken), "application/json", 401, "invalid_token"},
			"id token":     {refreshBody(set.IDToken), "application/json", 401, "invalid_token"},
			"garbage":      {refreshBody("not-a-token"), "application/json", 401, "invalid_token"},
			"missing":      {`{}`, "application/json", 400, "validation_failed"},
			"wrong type":   {`{"refresh_token":{"$ne":null}}`, "application/json", 400, "validation_failed"},
			"malformed":    {`{"refresh_token":`, "application/json", 400, "malformed_json"},
			"null":         {`null`, "application/json", 400, "malformed_json"},
			"form":         {"refresh_token=x", "application/x-www-form-urlencoded", 415, "unsupported_media_type"},
			"too large":    {refreshBody(strings.Repeat("a", 17<<10)), "application/json", 413, "body_too_large"},
		} {
			t.Run(path+" "+name, func(t *testing.T) {
				a.callInvalid("POST", path, "", tc.body, tc.contentType).problem(t, tc.status, tc.code)
			})
		}
	}
	// None of that touched the session.
	if status, _ := a.refresh(set.RefreshToken); status != http.StatusOK {
		t.Fatalf("session after bad inputs: %d", status)
	}
}
