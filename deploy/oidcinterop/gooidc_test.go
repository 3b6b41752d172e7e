package oidcinterop

import (
	"context"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/acme/platform/deploy/internal/svcproc"
	"github.com/acme/platform/pkg/testkit/mongotest"
)

// The app of TestGoOIDCAuthorizationCodeFlow: a native app listening on a
// loopback port (RFC 8252), registered without one.
const (
	appRedirectRegistered = "http://127.0.0.1/callback"
	appRedirect           = "http://127.0.0.1:47113/callback"
	appSignedOut          = "http://127.0.0.1/signed-out"
)

// TestGoOIDCAuthorizationCodeFlow runs the authorization code flow with
// PKCE against the real binaries with golang.org/x/oauth2 and
// github.com/coreos/go-oidc/v3, as a Go app does: discovery, the
// authorization request, the sign-in page submitted like a browser (a
// cookie jar, the form as the page writes it), the code exchange, the id
// token validated by go-oidc (signature from the JWKS, iss, aud, expiry,
// nonce), userinfo, refresh, single sign-on and RP-Initiated Logout.
func TestGoOIDCAuthorizationCodeFlow(t *testing.T) {
	bin, err := svcproc.Binaries(t.Context(), t.TempDir(), "account", "conversations")
	if err != nil {
		t.Fatal(err)
	}
	pair := svcproc.StartPairForTest(t, bin, mongotest.URI(t), mongotest.New(t).Name(), mongotest.New(t).Name(),
		[]string{"ACCOUNT_AUDIENCE=" + audience}, []string{"CONVERSATIONS_AUDIENCE=" + audience})
	const accountName, username = "gooidc", "carol"
	password := randomSecret(t)
	pair.Account(t, "", "create-account", accountName)
	pair.Account(t, password+"\n", "create-user", "--account", accountName, "--username", username)
	out := pair.Account(t, "", "create-client", "--account", accountName, "--name", "go app", "--public",
		"--redirect-uri", appRedirectRegistered, "--post-logout-redirect-uri", appSignedOut)
	m := clientIDPattern.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("create-client printed no client_id:\n%s", out)
	}
	clientID := m[1]

	ctx := context.Background()
	provider, err := oidc.NewProvider(ctx, pair.AccountURL)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	var meta struct {
		EndSession string   `json:"end_session_endpoint"`
		PKCE       []string `json:"code_challenge_methods_supported"`
		Iss        bool     `json:"authorization_response_iss_parameter_supported"`
	}
	if err := provider.Claims(&meta); err != nil || meta.EndSession == "" || !slices.Equal(meta.PKCE, []string{"S256"}) || !meta.Iss {
		t.Fatalf("discovery metadata %+v, %v", meta, err)
	}
	cfg := oauth2.Config{ClientID: clientID, Endpoint: provider.Endpoint(), RedirectURL: appRedirect,
		Scopes: []string{oidc.ScopeOpenID, "profile", "email"}}
	cfg.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	idVerifier := provider.Verifier(&oidc.Config{ClientID: clientID})

	b := newBrowser()
	// 1. Sign in on the page.
	verifier := oauth2.GenerateVerifier()
	state, nonce := randomSecret(t), randomSecret(t)
	page := b.get(t, cfg.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)))
	if page.StatusCode != http.StatusOK {
		t.Fatalf("authorization request: %d %s", page.StatusCode, page.body)
	}
	back := b.submit(t, pair.AccountURL, page, map[string]string{"accountName": accountName, "username": username, "password": password})
	code := callback(t, back, state, pair.AccountURL)
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	rawID, _ := tok.Extra("id_token").(string)
	idt, err := idVerifier.Verify(ctx, rawID)
	if err != nil {
		t.Fatalf("go-oidc refused the id token: %v", err)
	}
	var claims struct {
		AZP      string   `json:"azp"`
		AMR      []string `json:"amr"`
		AuthTime int64    `json:"auth_time"`
		Username string   `json:"preferred_username"`
	}
	if err := idt.Claims(&claims); err != nil || idt.Nonce != nonce || claims.AZP != clientID || !slices.Equal(claims.AMR, []string{"pwd"}) ||
		claims.AuthTime == 0 || claims.Username != username {
		t.Fatalf("id token nonce %q claims %+v, %v; want nonce %q, azp %s, amr [pwd], auth_time", idt.Nonce, claims, err, nonce, clientID)
	}

	// 2. Userinfo with the access token.
	info, err := provider.UserInfo(ctx, oauth2.StaticTokenSource(tok))
	if err != nil || info.Subject != idt.Subject {
		t.Fatalf("userinfo: %+v, %v; want subject %s", info, err, idt.Subject)
	}

	// 3. Refresh: a new refresh token (rotation) and a valid id token.
	refreshed, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil || refreshed.RefreshToken == "" || refreshed.RefreshToken == tok.RefreshToken {
		t.Fatalf("refresh: %+v, %v; want a rotated refresh token", refreshed, err)
	}
	if raw, _ := refreshed.Extra("id_token").(string); raw == "" {
		t.Fatal("refresh returned no id token")
	} else if _, err := idVerifier.Verify(ctx, raw); err != nil {
		t.Fatalf("go-oidc refused the refreshed id token: %v", err)
	}

	// 4. Single sign-on: the next authorization needs no page.
	verifier2, state2 := oauth2.GenerateVerifier(), randomSecret(t)
	sso := b.get(t, cfg.AuthCodeURL(state2, oidc.Nonce("n2"), oauth2.S256ChallengeOption(verifier2), oauth2.SetAuthURLParam("prompt", "none")))
	tok2, err := cfg.Exchange(ctx, callback(t, sso, state2, pair.AccountURL), oauth2.VerifierOption(verifier2))
	if err != nil {
		t.Fatalf("SSO exchange: %v", err)
	}

	// 5. Logout ends the browser session and the sessions it started.
	raw2, _ := tok2.Extra("id_token").(string)
	q := url.Values{"id_token_hint": {raw2}, "post_logout_redirect_uri": {appSignedOut}, "state": {"bye"}}
	bye := b.get(t, meta.EndSession+"?"+q.Encode())
	if bye.StatusCode != http.StatusSeeOther || bye.Header.Get("Location") != appSignedOut+"?state=bye" {
		t.Fatalf("logout: %d %q", bye.StatusCode, bye.Header.Get("Location"))
	}
	if _, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: refreshed.RefreshToken}).Token(); !isInvalidGrant(err) {
		t.Fatalf("refresh after logout: %v, want invalid_grant", err)
	}
	if _, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok2.RefreshToken}).Token(); !isInvalidGrant(err) {
		t.Fatalf("refresh of the SSO session after logout: %v, want invalid_grant", err)
	}
	again := b.get(t, cfg.AuthCodeURL("s3", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()), oauth2.SetAuthURLParam("prompt", "none")))
	if loc, _ := url.Parse(again.Header.Get("Location")); loc == nil || loc.Query().Get("error") != "login_required" {
		t.Fatalf("prompt=none after logout: %d %q, want login_required", again.StatusCode, again.Header.Get("Location"))
	}
}

func isInvalidGrant(err error) bool {
	var re *oauth2.RetrieveError
	return errors.As(err, &re) && re.ErrorCode == "invalid_grant"
}

// browser is a user agent: cookies, and redirects seen rather than
// followed.
type browser struct{ client *http.Client }

type page struct {
	*http.Response
	body string
}

func newBrowser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{&http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(t *testing.T, req *http.Request) page {
	t.Helper()
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return page{resp, string(body)}
}

func (b *browser) get(t *testing.T, u string) page {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	return b.do(t, req)
}

var (
	formPattern  = regexp.MustCompile(`<form method="post" action="([^"]+)"`)
	inputPattern = regexp.MustCompile(`<input [^>]*name="([^"]+)"[^>]*>`)
	valuePattern = regexp.MustCompile(`value="([^"]*)"`)
)

// submit fills the page's form with fields and posts it, as a browser
// does: every input the page wrote, with its value, then what the user
// typed.
func (b *browser) submit(t *testing.T, base string, p page, typed map[string]string) page {
	t.Helper()
	m := formPattern.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no form on the page:\n%s", p.body)
	}
	form := url.Values{}
	for _, in := range inputPattern.FindAllStringSubmatch(p.body, -1) {
		v := ""
		if vm := valuePattern.FindStringSubmatch(in[0]); vm != nil {
			v = html.UnescapeString(vm[1])
		}
		form.Set(in[1], v)
	}
	for k, v := range typed {
		form.Set(k, v)
	}
	req, _ := http.NewRequest(http.MethodPost, base+html.UnescapeString(m[1]), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(t, req)
}

// callback checks the redirect to the app and returns its code.
func callback(t *testing.T, p page, state, issuer string) string {
	t.Helper()
	loc, err := url.Parse(p.Header.Get("Location"))
	if err != nil || !strings.HasPrefix(loc.String(), appRedirect+"?") {
		t.Fatalf("%d Location %q, want the app's redirect URI; body %.300s", p.StatusCode, p.Header.Get("Location"), p.body)
	}
	q := loc.Query()
	if q.Get("state") != state || q.Get("iss") != issuer || q.Get("code") == "" {
		t.Fatalf("callback query %v, want state %q, iss %q and a code", q, state, issuer)
	}
	return q.Get("code")
}
