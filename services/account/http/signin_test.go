package http_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"github.com/acme/platform/pkg/testkit/openapitest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
)

// The authorization code flow as a browser runs it: each browser is an
// HTTP client with its own cookie jar that does not follow redirects, so
// that the test sees where the service sends it; forms are submitted as
// the page writes them. Every exchange is validated against the OpenAPI
// document.

const (
	appRedirect      = "https://app.example/cb"
	appLogout        = "https://app.example/signed-out"
	loopbackRedirect = "http://127.0.0.1/callback"
)

type signInAPI struct {
	*oauthAPI
	app, other, globexApp account.ServiceClient
}

func newSignInAPI(t *testing.T, doc *openapitest.Validator) *signInAPI {
	t.Helper()
	s := &signInAPI{oauthAPI: newOAuthAPI(t, doc, 0)}
	s.app = s.registerApp(s.acme, "web app", appRedirect, loopbackRedirect)
	s.other = s.registerApp(s.acme, "second app", "https://second.example/cb")
	s.globexApp = s.registerApp(s.globex, "globex app", "https://globex.example/cb")
	return s
}

// registerApp stores a public client of acc with redirect URIs, as
// create-client --public --redirect-uri does.
func (s *signInAPI) registerApp(acc account.Account, name string, redirects ...string) account.ServiceClient {
	s.t.Helper()
	c, err := account.NewPublicClient(acc, name)
	if err != nil {
		s.t.Fatal(err)
	}
	r, err := account.CheckRegistration(account.ClientRegistration{Grants: c.Grants, RedirectURIs: redirects,
		PostLogoutRedirectURIs: []string{appLogout}}, true)
	if err != nil {
		s.t.Fatal(err)
	}
	c.RedirectURIs, c.PostLogoutRedirectURIs = r.RedirectURIs, r.PostLogoutRedirectURIs
	created, err := s.store.CreateClient(context.Background(), c)
	if err != nil {
		s.t.Fatal(err)
	}
	return created
}

// browser is one user agent with its cookies.
type browser struct {
	s      *signInAPI
	client *http.Client
}

func (s *signInAPI) newBrowser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{s: s, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (b *browser) do(req *http.Request) response {
	b.s.t.Helper()
	resp, err := b.client.Do(req)
	if err != nil {
		b.s.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	b.s.doc.CheckResponse(b.s.t, req, resp, body)
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

func (b *browser) get(path string, q url.Values) response {
	req, _ := http.NewRequest(http.MethodGet, b.s.srv.URL+path+"?"+q.Encode(), nil)
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) response {
	req, _ := http.NewRequest(http.MethodPost, b.s.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// pkce is a verifier and its S256 challenge.
type pkce struct{ verifier, challenge string }

func newPKCE() pkce {
	v := rand.Text() + rand.Text() // 52 characters of base32
	sum := sha256.Sum256([]byte(v))
	return pkce{v, base64.RawURLEncoding.EncodeToString(sum[:])}
}

// authorizeParams is a valid authorization request of client.
func authorizeParams(client account.ServiceClient, redirect string, p pkce) url.Values {
	return url.Values{"client_id": {client.ID}, "redirect_uri": {redirect}, "response_type": {"code"},
		"scope": {"openid profile"}, "state": {"st-" + rand.Text()}, "nonce": {"n-" + rand.Text()},
		"code_challenge": {p.challenge}, "code_challenge_method": {"S256"}}
}

var (
	formAction  = regexp.MustCompile(`<form method="post" action="([^"]+)"`)
	inputFields = regexp.MustCompile(`<input (?:id="[^"]*" )?(?:type="hidden" )?name="([^"]+)"(?: type="[^"]*")? (?:value="([^"]*)")?`)
)

// form reads the sign-in page's form: its action and every field with
// its value.
func (s *signInAPI) form(t *testing.T, page response) (string, url.Values) {
	t.Helper()
	if page.status != http.StatusOK && page.status != http.StatusUnauthorized && page.status != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want the sign-in page; body %s", page.status, page.body)
	}
	m := formAction.FindSubmatch(page.body)
	if m == nil {
		t.Fatalf("no form in the page:\n%s", page.body)
	}
	fields := url.Values{}
	for _, f := range inputFields.FindAllSubmatch(page.body, -1) {
		fields.Set(string(f[1]), html.UnescapeString(string(f[2])))
	}
	return html.UnescapeString(string(m[1])), fields
}

// signIn submits the page with credentials, as a browser does.
func (b *browser) signIn(t *testing.T, page response, accountName, username, pw string) response {
	t.Helper()
	action, fields := b.s.form(t, page)
	fields.Set("accountName", accountName)
	fields.Set("username", username)
	fields.Set("password", pw)
	return b.post(action, fields)
}

// redirected returns the query of a redirect to prefix, and checks iss.
func (s *signInAPI) redirected(t *testing.T, r response, prefix string) url.Values {
	t.Helper()
	loc := r.header.Get("Location")
	if (r.status != http.StatusFound && r.status != http.StatusSeeOther) || !strings.HasPrefix(loc, prefix+"?") {
		t.Fatalf("status %d Location %q, want a redirect to %s; body %.300s", r.status, loc, prefix, r.body)
	}
	u, _ := url.Parse(loc)
	q := u.Query()
	if q.Get("iss") != s.srv.URL {
		t.Fatalf("redirect %s: iss = %q, want %q (RFC 9207)", loc, q.Get("iss"), s.srv.URL)
	}
	return q
}

// code runs the flow in b up to the code: the page when the browser has no
// session (signing in as alice), or at once.
func (s *signInAPI) code(t *testing.T, b *browser, client account.ServiceClient, redirect string, p pkce) string {
	t.Helper()
	q := authorizeParams(client, redirect, p)
	r := b.get("/oauth2/authorize", q)
	if r.status == http.StatusOK {
		r = b.signIn(t, r, "acme", "alice", "alice-password")
	}
	back := s.redirected(t, r, redirect)
	if back.Get("state") != q.Get("state") || back.Get("code") == "" {
		t.Fatalf("redirect query %v, want a code and state %q", back, q.Get("state"))
	}
	return back.Get("code")
}

// exchange redeems a code at the token endpoint as a public client.
func (s *signInAPI) exchange(clientID, code, redirect, verifier string) oauthResponse {
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}, "client_id": {clientID}}
	if verifier != "" {
		form.Set("code_verifier", verifier)
	}
	return s.postForm(s.tokenEndpoint, form.Encode(), formType, nil)
}

func TestSignIn(t *testing.T) {
	t.Parallel()
	doc := openapitest.Load(t, accounthttp.OpenAPI)
	s := newSignInAPI(t, doc)

	t.Run("Metrics", func(t *testing.T) { testSignInMetrics(t, s) })
	t.Run("FullFlowAndSingleSignOn", func(t *testing.T) { testFullFlow(t, s) })
	t.Run("SecurityCases", func(t *testing.T) { testSignInSecurityCases(t, s) })
	t.Run("CodeReplayRevokesSession", func(t *testing.T) { testCodeReplay(t, s) })
	t.Run("CodeReplayRacingTheExchange", func(t *testing.T) { testCodeReplayRacingTheExchange(t, s) })
	t.Run("ExpiredCode", func(t *testing.T) { testExpiredCode(t, s) })
	t.Run("CSRF", func(t *testing.T) { testSignInCSRF(t, s) })
	t.Run("PromptAndMaxAge", func(t *testing.T) { testPromptAndMaxAge(t, s) })
	t.Run("FailedSignInOneMessageAndThrottle", func(t *testing.T) { testFailedSignIn(t, s) })
	t.Run("Logout", func(t *testing.T) { testRPLogout(t, s) })
	t.Run("PasswordChangeEndsBrowserSession", func(t *testing.T) { testPasswordChangeEndsSSO(t, s) })
	t.Run("SecondFactorStep", func(t *testing.T) { testSignInSecondFactor(t, s) })
	t.Run("ClientCacheTTL", func(t *testing.T) { testAuthorizeClientCache(t, s) })

	doc.AssertAllOperationsCovered(t, "* * 503", "* /login *", "* /token/refresh *", "* /logout *",
		"* /definitions *", "* /definitions/{id} *", "* /users *", "* /users/* *", "* /users/*/password *",
		"* /userinfo *", "* /password *", "* /oauth2/revoke *", "* /.well-known/jwks.json *", "* /openapi.yaml *",
		"* /mfa/* *", "* /mfa/*/* *", "* /users/*/mfa *",
		"POST /oauth2/token 401", "POST /oauth2/token 413", "POST /oauth2/token 429")
}

// testAuthorizeClientCache: the authorization endpoint reuses a client it
// read for the cache's TTL (one second here), then sees it disabled.
func testAuthorizeClientCache(t *testing.T, s *signInAPI) {
	app := s.registerApp(s.acme, "cached app", appRedirect)
	q := authorizeParams(app, appRedirect, newPKCE())
	b := s.newBrowser()
	if r := b.get("/oauth2/authorize", q); r.status != http.StatusOK {
		t.Fatalf("authorize: %d %s", r.status, r.body)
	}
	if err := s.store.SetClientDisabled(context.Background(), s.acme.ID, app.ID, true); err != nil {
		t.Fatal(err)
	}
	if r := b.get("/oauth2/authorize", q); r.status != http.StatusOK {
		t.Fatalf("authorize of a client disabled within the TTL: %d, want the page from the cache", r.status)
	}
	s.clock.Advance(time.Second)
	if r := b.get("/oauth2/authorize", q); r.status != http.StatusBadRequest {
		t.Fatalf("authorize of a disabled client after the TTL: %d, want 400", r.status)
	}
}

func testFullFlow(t *testing.T, s *signInAPI) {
	b := s.newBrowser()
	p := newPKCE()
	q := authorizeParams(s.app, appRedirect, p)
	page := b.get("/oauth2/authorize", q)
	if page.status != http.StatusOK {
		t.Fatalf("authorize: %d %s", page.status, page.body)
	}
	csp := page.header.Get("Content-Security-Policy")
	for _, want := range []string{"frame-ancestors 'none'", "default-src 'none'", "form-action 'self' https://app.example"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "script-src") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q allows script", csp)
	}
	for h, want := range map[string]string{"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"} {
		if got := page.header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	body := string(page.body)
	for _, want := range []string{`<html lang="en">`, `name="viewport"`, `<label for="accountName">`, `<label for="username">`,
		`<label for="password">`, `name="accountName"`, `name="username"`, `name="password" type="password"`, `value="acme"`, "<h1>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(body, "<script") || strings.Contains(body, "style=") {
		t.Error("the page has a script or an inline style")
	}
	css := b.get("/oauth2/assets/signin.css", nil)
	if css.status != http.StatusOK || !strings.HasPrefix(css.header.Get("Content-Type"), "text/css") {
		t.Fatalf("stylesheet: %d %s", css.status, css.header.Get("Content-Type"))
	}

	r := b.signIn(t, page, "acme", "alice", "alice-password")
	back := s.redirected(t, r, appRedirect)
	if back.Get("state") != q.Get("state") || back.Get("code") == "" {
		t.Fatalf("redirect %v", back)
	}
	var cookie string
	for _, c := range r.header.Values("Set-Cookie") {
		if strings.HasPrefix(c, "account_session=") {
			cookie = c
		}
	}
	if !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Lax") {
		t.Fatalf("session cookie %q, want HttpOnly and SameSite=Lax", cookie)
	}

	tr := s.exchange(s.app.ID, back.Get("code"), appRedirect, p.verifier)
	if tr.status != http.StatusOK || tr.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("exchange: %d %s", tr.status, tr.body)
	}
	set := tr.tokenSet(t)
	id := s.idTokenOf(t, set.IDToken, s.app.ID)
	if id.Nonce != q.Get("nonce") || !slices.Equal(id.AMR, []string{"pwd"}) || id.AuthTime.IsZero() || id.PreferredUsername != "alice" {
		t.Fatalf("id token claims %+v, want nonce %q, amr [pwd], auth_time, alice", id, q.Get("nonce"))
	}
	access, err := s.verifier.Verify(context.Background(), set.AccessToken)
	if err != nil || access.ClientID != s.app.ID || access.IsClient() {
		t.Fatalf("access token %+v, %v: want a user's token with client_id %s (RFC 9068)", access, err, s.app.ID)
	}
	// The refresh token is the app's and rotates.
	refreshed := s.postForm(s.tokenEndpoint, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {set.RefreshToken},
		"client_id": {s.app.ID}}.Encode(), formType, nil)
	if refreshed.status != http.StatusOK {
		t.Fatalf("refresh: %d %s", refreshed.status, refreshed.body)
	}
	if again := s.postForm(s.tokenEndpoint, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshed.tokenSet(t).RefreshToken},
		"client_id": {s.other.ID}}.Encode(), formType, nil); again.status != http.StatusBadRequest {
		t.Fatalf("refresh by another client: %d, want 400 invalid_grant", again.status)
	}

	// Single sign-on: another app of the account, no page.
	p2 := newPKCE()
	sso := b.get("/oauth2/authorize", authorizeParams(s.other, "https://second.example/cb", p2))
	code := s.redirected(t, sso, "https://second.example/cb").Get("code")
	if tr := s.exchange(s.other.ID, code, "https://second.example/cb", p2.verifier); tr.status != http.StatusOK {
		t.Fatalf("SSO exchange: %d %s", tr.status, tr.body)
	}
	// An app of another account shows the page.
	if r := b.get("/oauth2/authorize", authorizeParams(s.globexApp, "https://globex.example/cb", newPKCE())); r.status != http.StatusOK {
		t.Fatalf("another account's app: %d, want the page", r.status)
	}
	// A loopback redirect URI matches on any port (RFC 8252 section 7.3).
	p3 := newPKCE()
	port := "http://127.0.0.1:53117/callback"
	code = s.code(t, b, s.app, port, p3)
	if tr := s.exchange(s.app.ID, code, port, p3.verifier); tr.status != http.StatusOK {
		t.Fatalf("loopback exchange: %d %s", tr.status, tr.body)
	}
}

// testSignInSecurityCases is the table of refused requests: each gets the
// answer the flow names, and changes nothing (the code or session it
// tried stays usable by its rightful owner).
func testSignInSecurityCases(t *testing.T, s *signInAPI) {
	b := s.newBrowser()
	page := func(r response) bool { return r.status == http.StatusBadRequest && r.header.Get("Location") == "" }
	redirectErr := func(t *testing.T, r response, code string) {
		t.Helper()
		q := s.redirected(t, r, appRedirect)
		if q.Get("error") != code || q.Get("error_description") == "" || !strings.HasPrefix(q.Get("state"), "st-") {
			t.Fatalf("redirect %v, want error %s with a description and the state", q, code)
		}
	}
	authorize := []struct {
		name string
		edit func(url.Values)
		want func(*testing.T, response)
	}{
		{"unknown client", func(q url.Values) { q.Set("client_id", "cli_unknown") }, func(t *testing.T, r response) {
			if !page(r) {
				t.Fatalf("%d %q, want the error page", r.status, r.header.Get("Location"))
			}
		}},
		{"redirect URI off by one character", func(q url.Values) { q.Set("redirect_uri", appRedirect+"x") }, nil},
		{"redirect URI with an added path", func(q url.Values) { q.Set("redirect_uri", appRedirect+"/more") }, nil},
		{"redirect URI with an added query", func(q url.Values) { q.Set("redirect_uri", appRedirect+"?next=evil") }, nil},
		{"redirect URI of another host", func(q url.Values) { q.Set("redirect_uri", "https://evil.example/cb") }, nil},
		{"redirect URI on another loopback path", func(q url.Values) { q.Set("redirect_uri", "http://127.0.0.1:8080/other") }, nil},
		{"no redirect URI", func(q url.Values) { q.Del("redirect_uri") }, nil},
		{"plain PKCE", func(q url.Values) { q.Set("code_challenge_method", "plain") }, func(t *testing.T, r response) { redirectErr(t, r, "invalid_request") }},
		{"no PKCE", func(q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") }, func(t *testing.T, r response) { redirectErr(t, r, "invalid_request") }},
		{"challenge without method", func(q url.Values) { q.Del("code_challenge_method") }, func(t *testing.T, r response) { redirectErr(t, r, "invalid_request") }},
		{"token response type", func(q url.Values) { q.Set("response_type", "token") }, func(t *testing.T, r response) { redirectErr(t, r, "unsupported_response_type") }},
		{"scope the app does not hold", func(q url.Values) { q.Set("scope", "openid users:write") }, func(t *testing.T, r response) { redirectErr(t, r, "invalid_scope") }},
		{"unknown prompt", func(q url.Values) { q.Set("prompt", "consent") }, func(t *testing.T, r response) { redirectErr(t, r, "invalid_request") }},
		{"prompt=none without a session", func(q url.Values) { q.Set("prompt", "none") }, func(t *testing.T, r response) { redirectErr(t, r, "login_required") }},
	}
	for _, tc := range authorize {
		t.Run(tc.name, func(t *testing.T) {
			q := authorizeParams(s.app, appRedirect, newPKCE())
			tc.edit(q)
			r := b.get("/oauth2/authorize", q)
			if tc.want == nil {
				if !page(r) || !strings.Contains(string(r.body), "not registered") {
					t.Fatalf("%d %q %.200s, want the error page", r.status, r.header.Get("Location"), r.body)
				}
				return
			}
			tc.want(t, r)
		})
	}
	t.Run("repeated parameter", func(t *testing.T) {
		q := authorizeParams(s.app, appRedirect, newPKCE())
		q.Add("scope", "openid")
		redirectErr(t, b.get("/oauth2/authorize", q), "invalid_request")
	})

	p := newPKCE()
	code := s.code(t, b, s.app, appRedirect, p)
	exchange := []struct {
		name                          string
		client, code, redirect, verif string
	}{
		{"wrong verifier", s.app.ID, code, appRedirect, newPKCE().verifier},
		{"missing verifier", s.app.ID, code, appRedirect, ""},
		{"the challenge as verifier (plain)", s.app.ID, code, appRedirect, p.challenge},
		{"redirect URI off by one character", s.app.ID, code, appRedirect + "x", p.verifier},
		{"another redirect URI of the app", s.app.ID, code, loopbackRedirect, p.verifier},
		{"code for another client", s.other.ID, code, appRedirect, p.verifier},
		{"unknown code", s.app.ID, "not-a-code", appRedirect, p.verifier},
	}
	for _, tc := range exchange {
		t.Run("exchange: "+tc.name, func(t *testing.T) {
			r := s.exchange(tc.client, tc.code, tc.redirect, tc.verif)
			r.oauthError(t, http.StatusBadRequest, "invalid_grant")
		})
	}
	// Bad input changed nothing: the code still works, once.
	if r := s.exchange(s.app.ID, code, appRedirect, p.verifier); r.status != http.StatusOK {
		t.Fatalf("the rightful exchange after refused ones: %d %s", r.status, r.body)
	}

	// Account mismatch between the session and the request: the page.
	for name, edit := range map[string]func(url.Values){
		"another account named":  func(q url.Values) { q.Set("account_name", "globex") },
		"another user hinted":    func(q url.Values) { q.Set("login_hint", "mallory") },
		"the session's user too": func(q url.Values) { q.Set("login_hint", "Alice") },
	} {
		q := authorizeParams(s.app, appRedirect, newPKCE())
		edit(q)
		r := b.get("/oauth2/authorize", q)
		wantPage := name != "the session's user too"
		if (r.status == http.StatusOK) != wantPage {
			t.Errorf("%s: status %d, want the page: %v", name, r.status, wantPage)
		}
		if name == "another account named" && !strings.Contains(string(r.body), `value="globex"`) {
			t.Errorf("%s: the page does not prefill the account", name)
		}
	}
}

func testCodeReplay(t *testing.T, s *signInAPI) {
	b := s.newBrowser()
	p := newPKCE()
	code := s.code(t, b, s.app, appRedirect, p)
	first := s.exchange(s.app.ID, code, appRedirect, p.verifier)
	if first.status != http.StatusOK {
		t.Fatalf("first exchange: %d %s", first.status, first.body)
	}
	set := first.tokenSet(t)
	replay := s.exchange(s.app.ID, code, appRedirect, p.verifier)
	replay.oauthError(t, http.StatusBadRequest, "invalid_grant")
	// RFC 6749 section 4.1.2: the session the code started has ended.
	r := s.postForm(s.tokenEndpoint, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {set.RefreshToken},
		"client_id": {s.app.ID}}.Encode(), formType, nil)
	r.oauthError(t, http.StatusBadRequest, "invalid_grant")
}

// A replay that comes while the first exchange has spent the code but not
// yet stored its session still ends that session: it is stored revoked.
func testCodeReplayRacingTheExchange(t *testing.T, s *signInAPI) {
	ctx := context.Background()
	b := s.newBrowser()
	p := newPKCE()
	code := s.code(t, b, s.app, appRedirect, p)
	sum := sha256.Sum256([]byte(code))
	id := hex.EncodeToString(sum[:])
	if err := s.store.SpendAuthCode(ctx, id); err != nil { // the first exchange, in flight
		t.Fatal(err)
	}
	s.exchange(s.app.ID, code, appRedirect, p.verifier).oauthError(t, http.StatusBadRequest, "invalid_grant")
	stored, err := s.store.AuthCodeByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.store.SessionByID(ctx, s.acme.ID, stored.SessionID)
	if err != nil || !sess.Revoked {
		t.Fatalf("the code's session after the replay: %+v, %v; want it stored revoked", sess, err)
	}
	// The first exchange, resuming, cannot store it live.
	err = s.store.CreateSession(ctx, account.Session{ID: stored.SessionID, AccountID: s.acme.ID, UserID: sess.UserID, RefreshID: "r", ExpiresAt: time.Now().Add(time.Hour)})
	if !errors.Is(err, account.ErrDuplicate) {
		t.Fatalf("storing the code's session after the replay: %v, want ErrDuplicate", err)
	}
}

func testExpiredCode(t *testing.T, s *signInAPI) {
	b := s.newBrowser()
	p := newPKCE()
	code := s.code(t, b, s.app, appRedirect, p)
	s.clock.Advance(account.CodeTTL + time.Second)
	r := s.exchange(s.app.ID, code, appRedirect, p.verifier)
	r.oauthError(t, http.StatusBadRequest, "invalid_grant")
	// Within 60 s it works.
	p = newPKCE()
	code = s.code(t, b, s.app, appRedirect, p)
	s.clock.Advance(account.CodeTTL - time.Second)
	if r := s.exchange(s.app.ID, code, appRedirect, p.verifier); r.status != http.StatusOK {
		t.Fatalf("code at 59 s: %d %s", r.status, r.body)
	}
}

func testSignInCSRF(t *testing.T, s *signInAPI) {
	a, other := s.newBrowser(), s.newBrowser()
	pageA := a.get("/oauth2/authorize", authorizeParams(s.app, appRedirect, newPKCE()))
	pageB := other.get("/oauth2/authorize", authorizeParams(s.app, appRedirect, newPKCE()))
	action, fieldsA := s.form(t, pageA)
	for name, submit := range map[string]func() response{
		"missing": func() response {
			f := url.Values{}
			for k, v := range fieldsA {
				f[k] = v
			}
			f.Del("csrf")
			f.Set("accountName", "acme")
			f.Set("username", "alice")
			f.Set("password", "alice-password")
			return a.post(action, f)
		},
		"from another browser": func() response {
			// The other browser submits a's form (a's token, its own cookie).
			f := url.Values{}
			for k, v := range fieldsA {
				f[k] = v
			}
			f.Set("accountName", "acme")
			f.Set("username", "alice")
			f.Set("password", "alice-password")
			return other.post(action, f)
		},
		"no cookie at all": func() response {
			return s.newBrowser().signIn(t, pageB, "acme", "alice", "alice-password")
		},
	} {
		r := submit()
		if r.status != http.StatusForbidden || r.header.Get("Location") != "" || len(r.header.Values("Set-Cookie")) > 0 {
			t.Errorf("CSRF token %s: %d Location %q cookies %v, want 403 and nothing set", name, r.status, r.header.Get("Location"), r.header.Values("Set-Cookie"))
		}
	}
	// Both browsers still sign in with their own forms.
	s.redirected(t, other.signIn(t, pageB, "acme", "alice", "alice-password"), appRedirect)
}

func testPromptAndMaxAge(t *testing.T, s *signInAPI) {
	b := s.newBrowser()
	s.code(t, b, s.app, appRedirect, newPKCE()) // signs in
	for name, edit := range map[string]func(url.Values){
		"prompt=login": func(q url.Values) { q.Set("prompt", "login") },
		"max_age=0":    func(q url.Values) { q.Set("max_age", "0") },
	} {
		q := authorizeParams(s.app, appRedirect, newPKCE())
		edit(q)
		if r := b.get("/oauth2/authorize", q); r.status != http.StatusOK {
			t.Errorf("%s with a session: %d, want the page", name, r.status)
		}
	}
	q := authorizeParams(s.app, appRedirect, newPKCE())
	q.Set("max_age", "3600")
	s.redirected(t, b.get("/oauth2/authorize", q), appRedirect)
	q.Set("prompt", "none")
	if back := s.redirected(t, b.get("/oauth2/authorize", q), appRedirect); back.Get("code") == "" {
		t.Fatalf("prompt=none with a session: %v, want a code", back)
	}
	s.clock.Advance(2 * time.Hour)
	if back := s.redirected(t, b.get("/oauth2/authorize", q), appRedirect); back.Get("error") != "login_required" {
		t.Fatalf("prompt=none past max_age: %v, want login_required", back)
	}
}

func testFailedSignIn(t *testing.T, s *signInAPI) {
	ctx := context.Background()
	addUser(t, s.store, cheapHasher(t), s.acme.ID, "trudy", "trudy-password")
	b := s.newBrowser()
	page := b.get("/oauth2/authorize", authorizeParams(s.app, appRedirect, newPKCE()))
	var message string
	for i, creds := range [][3]string{
		{"acme", "nobody", "trudy-password"}, {"nowhere", "trudy", "trudy-password"},
		{"acme", "trudy", "wrong"}, {"acme", "trudy", "wrong"}, {"acme", "trudy", "wrong"}, {"acme", "trudy", "wrong"}, {"acme", "trudy", "wrong"},
	} {
		r := b.signIn(t, page, creds[0], creds[1], creds[2])
		if r.status != http.StatusUnauthorized || r.header.Get("Location") != "" {
			t.Fatalf("attempt %d: %d, want 401 and the page", i, r.status)
		}
		m := regexp.MustCompile(`<p id="signin-error" class="error" role="alert">([^<]+)</p>`).FindSubmatch(r.body)
		if m == nil || !strings.Contains(string(r.body), `aria-describedby="signin-error"`) {
			t.Fatalf("attempt %d: no error message tied to the fields:\n%s", i, r.body)
		}
		if message != "" && string(m[1]) != message {
			t.Fatalf("attempt %d says %q, another says %q: one message for every failure", i, m[1], message)
		}
		message = string(m[1])
		page = r
	}
	// The page's failures locked trudy for POST /login too: one throttle.
	r := s.call("POST", "/login", "", `{"username":"trudy","password":"trudy-password","accountName":"acme"}`)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("POST /login after 5 failed sign-ins on the page: %d, want 429", r.status)
	}
	locked := b.signIn(t, page, "acme", "trudy", "trudy-password")
	if locked.status != http.StatusTooManyRequests || locked.header.Get("Retry-After") == "" || !strings.Contains(string(locked.body), html.EscapeString(message)) {
		t.Fatalf("locked: %d Retry-After %q, want 429 with the same message", locked.status, locked.header.Get("Retry-After"))
	}
	if _, err := s.store.UserByName(ctx, s.acme.ID, "trudy"); err != nil {
		t.Fatal(err)
	}
	// A form that is not a form, or names no known app: the error page.
	action, fields := s.form(t, page)
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+action, strings.NewReader(`{"username":"trudy"}`))
	req.Header.Set("Content-Type", "application/json")
	if r := b.do(req); r.status != http.StatusBadRequest || !strings.Contains(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("JSON sign-in: %d %s, want the 400 page", r.status, r.header.Get("Content-Type"))
	}
	fields.Set("client_id", "cli_unknown")
	if r := b.post(action, fields); r.status != http.StatusBadRequest {
		t.Fatalf("sign-in for an unknown app: %d, want the 400 page", r.status)
	}
}

func testRPLogout(t *testing.T, s *signInAPI) {
	b := s.newBrowser()
	p := newPKCE()
	code := s.code(t, b, s.app, appRedirect, p)
	set := s.exchange(s.app.ID, code, appRedirect, p.verifier).tokenSet(t)

	// Open redirects are refused and end nothing.
	for name, q := range map[string]url.Values{
		"unregistered URI":        {"client_id": {s.app.ID}, "post_logout_redirect_uri": {"https://evil.example/"}},
		"registered URI + path":   {"client_id": {s.app.ID}, "post_logout_redirect_uri": {appLogout + "/x"}},
		"registered URI + query":  {"client_id": {s.app.ID}, "post_logout_redirect_uri": {appLogout + "?to=https://evil.example"}},
		"URI without a client":    {"post_logout_redirect_uri": {appLogout}},
		"hint of another client":  {"id_token_hint": {set.IDToken}, "client_id": {s.other.ID}, "post_logout_redirect_uri": {appLogout}},
		"hint that is not valid":  {"id_token_hint": {"eyJhbGciOiJub25lIn0.e30."}, "post_logout_redirect_uri": {appLogout}},
		"access token as hint":    {"id_token_hint": {set.AccessToken}, "post_logout_redirect_uri": {appLogout}},
		"another account's hint?": {"client_id": {s.globexApp.ID}, "id_token_hint": {set.IDToken}, "post_logout_redirect_uri": {appLogout}},
	} {
		if r := b.get("/oauth2/logout", q); r.status != http.StatusBadRequest || r.header.Get("Location") != "" {
			t.Errorf("logout, %s: %d Location %q, want the 400 page", name, r.status, r.header.Get("Location"))
		}
	}
	q := authorizeParams(s.app, appRedirect, newPKCE())
	q.Set("prompt", "none")
	if back := s.redirected(t, b.get("/oauth2/authorize", q), appRedirect); back.Get("code") == "" {
		t.Fatalf("after refused logouts the session should stand: %v", back)
	}

	r := b.post("/oauth2/logout", url.Values{"id_token_hint": {set.IDToken}, "post_logout_redirect_uri": {appLogout}, "state": {"bye"}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != appLogout+"?state=bye" {
		t.Fatalf("logout: %d Location %q, want 303 to %s?state=bye", r.status, r.header.Get("Location"), appLogout)
	}
	if back := s.redirected(t, b.get("/oauth2/authorize", q), appRedirect); back.Get("error") != "login_required" {
		t.Fatalf("prompt=none after logout: %v, want login_required", back)
	}
	refresh := s.postForm(s.tokenEndpoint, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {set.RefreshToken},
		"client_id": {s.app.ID}}.Encode(), formType, nil)
	if refresh.status != http.StatusBadRequest {
		t.Fatalf("refresh of a session started in the ended browser session: %d, want invalid_grant", refresh.status)
	}
	// Without a redirect URI: the signed-out page; GET and POST alike.
	if r := b.get("/oauth2/logout", url.Values{"client_id": {s.app.ID}}); r.status != http.StatusOK || !strings.Contains(string(r.body), "signed out") {
		t.Fatalf("logout without a redirect: %d %s", r.status, r.body)
	}
	if r := b.post("/oauth2/logout", url.Values{"client_id": {s.app.ID}}); r.status != http.StatusOK {
		t.Fatalf("POST logout without a redirect: %d %s", r.status, r.body)
	}
	if r := b.post("/oauth2/logout", url.Values{"client_id": {s.app.ID}, "post_logout_redirect_uri": {"https://evil.example/"}}); r.status != http.StatusBadRequest {
		t.Fatalf("POST logout to an open redirect: %d, want 400", r.status)
	}
	if r := b.get("/oauth2/logout", url.Values{"client_id": {s.app.ID}, "post_logout_redirect_uri": {appLogout}}); r.status != http.StatusSeeOther ||
		r.header.Get("Location") != appLogout {
		t.Fatalf("GET logout with a redirect and no state: %d %q", r.status, r.header.Get("Location"))
	}
}

func testPasswordChangeEndsSSO(t *testing.T, s *signInAPI) {
	b := s.newBrowser()
	s.code(t, b, s.app, appRedirect, newPKCE())
	u, err := s.store.UserByName(context.Background(), s.acme.ID, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// What a password change, disabling or deleting the user does to the
	// user's sessions (account.Users).
	if err := s.store.RevokeUserSessions(context.Background(), s.acme.ID, u.ID); err != nil {
		t.Fatal(err)
	}
	q := authorizeParams(s.app, appRedirect, newPKCE())
	q.Set("prompt", "none")
	if back := s.redirected(t, b.get("/oauth2/authorize", q), appRedirect); back.Get("error") != "login_required" {
		t.Fatalf("prompt=none after the user's sessions ended: %v, want login_required", back)
	}
}

// tokenSet decodes a user's token response.
func (r oauthResponse) tokenSet(t *testing.T) token.Set {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("token response %d %s", r.status, r.body)
	}
	var set token.Set
	r.json(t, &set)
	return set
}

// counters reads the sign-in flow's counters, by name and label values.
func (s *signInAPI) counters(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "account_signins") && !strings.HasPrefix(f.GetName(), "account_authorization_codes") &&
			!strings.HasPrefix(f.GetName(), "account_sso_sessions") {
			continue
		}
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			out[key] = m.GetCounter().GetValue()
		}
	}
	return out
}

// Sign-ins count by method and outcome, codes when issued and redeemed,
// browser sessions when started and ended by logout.
func testSignInMetrics(t *testing.T, s *signInAPI) {
	before := s.counters(t)
	b := s.newBrowser()
	p := newPKCE()
	page := b.get("/oauth2/authorize", authorizeParams(s.app, appRedirect, p))
	page = b.signIn(t, page, "acme", "alice", "wrong password")
	code := s.redirected(t, b.signIn(t, page, "acme", "alice", "alice-password"), appRedirect).Get("code")
	set := s.exchange(s.app.ID, code, appRedirect, p.verifier).tokenSet(t)
	s.exchange(s.app.ID, code, appRedirect, p.verifier) // a replay: rejected
	s.code(t, b, s.other, "https://second.example/cb", newPKCE())
	b.get("/oauth2/logout", url.Values{"id_token_hint": {set.IDToken}})
	s.call("POST", "/login", "", `{"username":"alice","password":"alice-password","accountName":"acme"}`)
	after := s.counters(t)
	for key, want := range map[string]float64{
		"account_signins_total method=page outcome=invalid_credentials": 1,
		"account_signins_total method=page outcome=success":             1,
		"account_signins_total method=login outcome=success":            1,
		"account_signins_total method=password_grant outcome=success":   0,
		"account_authorization_codes_issued_total":                      2,
		"account_authorization_codes_redeemed_total outcome=success":    1,
		"account_authorization_codes_redeemed_total outcome=rejected":   1,
		"account_sso_sessions_started_total":                            1,
		"account_sso_sessions_ended_total":                              1,
	} {
		if got := after[key] - before[key]; got != want {
			t.Errorf("%s rose by %v, want %v", key, got, want)
		}
	}
}

// testSignInSecondFactor: a user with a second factor signs in on the page
// in two steps. The password shows a page that asks for the code only,
// the same page whether the password was right or not; the step is held
// server-side, single use, bound to the browser and the request; a wrong
// code shows it again and counts in the login throttle; a code computed
// by an independent implementation (github.com/pquerna/otp) completes the
// flow, and the id token says amr ["pwd","otp"].
func testSignInSecondFactor(t *testing.T, s *signInAPI) {
	ctx := context.Background()
	enrol := func(username string) func() string {
		u := addUser(t, s.store, cheapHasher(t), s.acme.ID, username, username+"-password")
		ref := account.SelfRef{AccountID: s.acme.ID, AccountName: "acme", UserID: u.ID}
		en, err := s.mfa.Begin(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		code := func() string {
			c, err := totp.GenerateCodeCustom(en.Secret, s.clock.Now(), totp.ValidateOpts{Period: 30, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		if _, err := s.mfa.Activate(ctx, ref, code()); err != nil {
			t.Fatal(err)
		}
		return code
	}
	carolCode, daveCode, eveCode := enrol("carol"), enrol("dave"), enrol("eve")
	s.clock.Advance(30 * time.Second)

	p := newPKCE()
	q := authorizeParams(s.app, appRedirect, p)
	pendingValue := regexp.MustCompile(`name="pending" value="[^"]*"`)
	// passwordStep signs in with the password in a new page of b and
	// checks that the answer is the second step, asking for the code only.
	passwordStep := func(b *browser, user, pw string) response {
		t.Helper()
		r := b.signIn(t, b.get("/oauth2/authorize", q), "acme", user, pw)
		body := string(r.body)
		if r.status != http.StatusOK || !strings.Contains(body, `name="otp"`) || !strings.Contains(body, `name="pending"`) ||
			strings.Contains(body, `name="password"`) || strings.Contains(body, `role="alert"`) || strings.Contains(body, pw) {
			t.Fatalf("the password of %s: %d, want the second step asking for the code only:\n%s", user, r.status, body)
		}
		return r
	}
	codeStep := func(b *browser, page response, code string) response {
		t.Helper()
		action, fields := s.form(t, page)
		fields.Set("otp", code)
		return b.post(action, fields)
	}
	isPage := func(r response, status int, field, message string) bool {
		return r.status == status && strings.Contains(string(r.body), `name="`+field+`"`) &&
			strings.Contains(html.UnescapeString(string(r.body)), message)
	}

	// A wrong password and a right one show the same page.
	b := s.newBrowser()
	wrongPw := passwordStep(b, "carol", "not-carols-password")
	rightPw := passwordStep(b, "carol", "carol-password")
	if a, z := pendingValue.ReplaceAll(wrongPw.body, nil), pendingValue.ReplaceAll(rightPw.body, nil); string(a) != string(z) {
		t.Fatalf("the second step differs after a wrong password:\n%s\n---\n%s", a, z)
	}
	// Behind a wrong password, a right code fails like a wrong one.
	if r := codeStep(b, wrongPw, carolCode()); !isPage(r, http.StatusUnauthorized, "otp", "password or the code is not right") {
		t.Fatalf("a right code after a wrong password: %d\n%s", r.status, r.body)
	}
	again := codeStep(b, rightPw, "000000x")
	if !isPage(again, http.StatusUnauthorized, "otp", "password or the code is not right") {
		t.Fatalf("a wrong code: %d, want the second step again\n%s", again.status, again.body)
	}
	// The step is single use: its first page, sent again, starts over.
	if r := codeStep(b, rightPw, carolCode()); !isPage(r, http.StatusUnauthorized, "password", "took too long or was already used") {
		t.Fatalf("a spent second step: %d, want the first step\n%s", r.status, r.body)
	}
	back := s.redirected(t, codeStep(b, again, carolCode()), appRedirect)
	set := s.exchange(s.app.ID, back.Get("code"), appRedirect, p.verifier).tokenSet(t)
	id, err := s.verifier.Verify(ctx, set.IDToken)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(id.AMR, ",") != "pwd,otp" {
		t.Fatalf("amr = %v, want [pwd otp]", id.AMR)
	}

	// The step is this browser's and this request's.
	s.clock.Advance(30 * time.Second)
	owner := s.newBrowser()
	step := passwordStep(owner, "dave", "dave-password")
	thief := s.newBrowser()
	_, theirs := s.form(t, thief.get("/oauth2/authorize", q))
	action, fields := s.form(t, step)
	fields.Set("csrf", theirs.Get("csrf"))
	fields.Set("otp", daveCode())
	if r := thief.post(action, fields); !isPage(r, http.StatusUnauthorized, "password", "took too long") || r.header.Get("Location") != "" {
		t.Fatalf("another browser's second step: %d\n%s", r.status, r.body)
	}
	step = passwordStep(owner, "dave", "dave-password")
	action, fields = s.form(t, step)
	fields.Set("state", "another-request")
	fields.Set("otp", daveCode())
	if r := owner.post(action, fields); !isPage(r, http.StatusUnauthorized, "password", "took too long") {
		t.Fatalf("the second step for another request: %d\n%s", r.status, r.body)
	}
	// It lasts a few minutes.
	step = passwordStep(owner, "dave", "dave-password")
	s.clock.Advance(account.PendingSignInTTL + time.Second)
	if r := codeStep(owner, step, daveCode()); !isPage(r, http.StatusUnauthorized, "password", "took too long") {
		t.Fatalf("an expired second step: %d\n%s", r.status, r.body)
	}

	// Wrong codes count in the login throttle: the user is locked out,
	// and a right code then does not sign in.
	s.clock.Advance(30 * time.Second)
	b = s.newBrowser()
	page := passwordStep(b, "eve", "eve-password")
	for i := 0; page.status != http.StatusTooManyRequests; i++ {
		if i == 10 {
			t.Fatal("ten wrong codes are not throttled")
		}
		page = codeStep(b, page, "000000x")
	}
	if r := codeStep(b, page, eveCode()); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("a right code after the lockout: %d, want 429\n%s", r.status, r.body)
	}
}

// Over https (an https issuer URL) the flow's cookies are Secure and
// __Host- prefixed: bound to this origin, never sent in clear.
func TestSignInCookiesOverHTTPS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	hasher := cheapHasher(t)
	const issuer = "https://account.example"
	kit := newTokenKitFor(t, "ES256", issuer)
	srv := httptestServer(t, accounthttp.NewHandler(kit.withAuthz(store, accounthttp.Deps{
		Sessions: kit.sessions(store, hasher, nil), Definitions: store, Verifier: kit.verifier, Keys: kit.keys, IssuerURL: issuer,
	})))
	acc, err := store.CreateAccount(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	addUser(t, store, hasher, acc.ID, "alice", "alice-password")
	app, _ := account.NewPublicClient(acc, "app")
	app.RedirectURIs = []string{appRedirect}
	if app, err = store.CreateClient(ctx, app); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(srv.URL + "/oauth2/authorize?" + authorizeParams(app, appRedirect, newPKCE()).Encode())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csrf := cookieNamed(t, resp.Header, "__Host-account_csrf")
	fields := url.Values{}
	for _, f := range inputFields.FindAllSubmatch(body, -1) {
		fields.Set(string(f[1]), html.UnescapeString(string(f[2])))
	}
	fields.Set("accountName", "acme")
	fields.Set("username", "alice")
	fields.Set("password", "alice-password")
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/oauth2/signin", strings.NewReader(fields.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(csrf)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	cookieNamed(t, resp.Header, "__Host-account_session")
}

// cookieNamed returns the cookie name that header sets, checking that it
// is Secure, HttpOnly, SameSite=Lax, of Path / and of no Domain (what
// __Host- requires).
func cookieNamed(t *testing.T, header http.Header, name string) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: header}).Cookies() {
		if c.Name == name {
			if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.Domain != "" {
				t.Fatalf("cookie %s = %+v, want Secure, HttpOnly, SameSite=Lax, Path=/, no Domain", name, c)
			}
			return c
		}
	}
	t.Fatalf("no cookie %s in %v", name, header.Values("Set-Cookie"))
	return nil
}

func httptestServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
