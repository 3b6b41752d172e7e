package token_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
	"github.com/acme/platform/pkg/web"
)

func (f *fixture) mintClient(t testing.TB, scopes ...string) string {
	t.Helper()
	tok, err := f.Issuer.MintClient(context.Background(), token.Client{
		ClientID: "cli_1", AccountID: "acct-1", AccountName: "acme", Scopes: scopes,
	})
	if err != nil {
		t.Fatalf("MintClient: %v", err)
	}
	return tok.AccessToken
}

func TestMintClient(t *testing.T) {
	t.Parallel()
	for _, alg := range algs() {
		t.Run(alg, func(t *testing.T) {
			f := newFixture(t, alg)
			tok, err := f.Issuer.MintClient(context.Background(), token.Client{
				ClientID: "cli_1", AccountID: "acct-1", AccountName: "acme",
				Scopes: []string{token.ScopeDefinitionsRead, token.ScopeConversationsWrite},
			})
			if err != nil {
				t.Fatal(err)
			}
			if tok.ExpiresIn != 3600 || tok.Scope != "definitions:read conversations:write" {
				t.Fatalf("token = %+v", tok)
			}
			c, err := f.Verifier.Verify(context.Background(), tok.AccessToken)
			if err != nil {
				t.Fatal(err)
			}
			if c.Type != token.TypeAccess || c.Use != token.UseAccess || c.Subject != "cli_1" || c.ClientID != "cli_1" ||
				c.AccountID != "acct-1" || c.AccountName != "acme" || c.SessionID != "" || c.PreferredUsername != "" ||
				!c.AuthTime.IsZero() || !slices.Equal(c.Scopes, []string{"definitions:read", "conversations:write"}) {
				t.Fatalf("claims = %+v", c)
			}
			if !c.IsClient() || !c.HasScope(token.ScopeDefinitionsRead) || c.HasScope(token.ScopeDefinitionsWrite) {
				t.Fatalf("IsClient/HasScope wrong for %+v", c)
			}
			_, claims, _ := parts(t, tok.AccessToken)
			for _, user := range []string{"sid", "preferred_username", "auth_time"} {
				if _, ok := claims[user]; ok {
					t.Errorf("client token carries user claim %q", user)
				}
			}
		})
	}
}

func TestMintClientRequiresScopes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgES256)
	for _, c := range []token.Client{
		{ClientID: "cli_1", AccountID: "acct-1"},
		{AccountID: "acct-1", Scopes: []string{"definitions:read"}},
		{ClientID: "cli_1", Scopes: []string{"definitions:read"}},
	} {
		if _, err := f.Issuer.MintClient(context.Background(), c); err == nil {
			t.Errorf("MintClient(%+v) succeeded", c)
		}
	}
}

func TestUserTokensAreNotClients(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgES256)
	c, err := f.Verifier.Verify(context.Background(), f.mint(t).AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	// RFC 9068: the user's access token names a client, the first-party
	// one for a set minted for none; it is still not a client's token.
	if c.IsClient() || c.ClientID != token.DefaultFirstPartyClientID || c.Scopes != nil || c.HasScope(token.ScopeDefinitionsRead) {
		t.Fatalf("user token claims = %+v", c)
	}
}

// A set minted for an OAuth client (the password and refresh grants)
// names the client in its id token's aud, beside the configured audience,
// and in azp; a verifier of the configured audience (the services') still
// accepts every token, and the user's access token does not become a
// client's.
func TestMintForClientNamesItInIDToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgES256)
	s := testSubject()
	s.ClientID = "cli_app"
	set, err := f.Issuer.Mint(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	id, err := f.Verifier.Verify(context.Background(), set.IDToken)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(id.Audience, []string{testAudience, "cli_app"}) || id.AuthorizedParty != "cli_app" || id.IsClient() {
		t.Fatalf("id token claims = %+v", id)
	}
	for name, raw := range map[string]string{"access": set.AccessToken, "refresh": set.RefreshToken} {
		_, claims, _ := parts(t, raw)
		wantClient := map[string]any{"access": "cli_app", "refresh": nil}[name]
		if aud, _ := json.Marshal(claims["aud"]); string(aud) != `["`+testAudience+`"]` || claims["azp"] != nil || claims["client_id"] != wantClient {
			t.Errorf("%s token claims = %v; want the configured audience alone, no azp, client_id %v", name, claims, wantClient)
		}
	}
	access, err := f.Verifier.Verify(context.Background(), set.AccessToken)
	if err != nil || access.IsClient() || access.AuthorizedParty != "" || access.ClientID != "cli_app" {
		t.Fatalf("access token claims = %+v, %v", access, err)
	}
	// Without a client, as for POST /login: the configured audience alone.
	plain, err := f.Verifier.Verify(context.Background(), f.mint(t).IDToken)
	if err != nil || !slices.Equal(plain.Audience, []string{testAudience}) || plain.AuthorizedParty != "" {
		t.Fatalf("id token of no client = %+v, %v", plain, err)
	}
}

// A token that claims a client but is not shaped as a client's access
// token is refused, even when properly signed.
func TestMalformedClientTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgES256)
	refreshVerifier := f.RefreshVerifier
	key := tokentest.RawKey(t, f.Key)
	for _, tc := range []struct {
		name     string
		use      token.Use
		verifier *token.Verifier
		sub      string
	}{
		{"subject is not the client", token.UseAccess, f.Verifier, "user-1"},
		{"id token of a client", token.UseID, f.Verifier, "cli_1"},
		{"refresh token of a client", token.UseRefresh, refreshVerifier, "cli_1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := f.validClaims(tc.use)
			claims["client_id"], claims["sub"], claims["scope"] = "cli_1", tc.sub, "definitions:read"
			if tc.use == token.UseAccess {
				delete(claims, "sid") // a user's access token has one
			}
			raw := tokentest.Forge(t, tokentest.Method(token.AlgES256), key,
				map[string]any{"alg": "ES256", "kid": kidOf(t, f.Key), "typ": tc.use.HeaderType()}, claims)
			_, err := tc.verifier.Verify(context.Background(), raw)
			assertReason(t, err, "malformed client token")
		})
	}
}

func TestParseScope(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"":                                    nil,
		"definitions:read":                    {"definitions:read"},
		" a  b a ":                            {"a", "b"},
		"conversations:read definitions:read": {"conversations:read", "definitions:read"},
	} {
		if got := token.ParseScope(in); !slices.Equal(got, want) {
			t.Errorf("ParseScope(%q) = %q, want %q", in, got, want)
		}
	}
}

// newScopedApp serves GET /defs behind Middleware and RequireScope.
func newScopedApp(v *token.Verifier) *echo.Echo {
	e := web.New(web.Config{})
	e.GET("/defs", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) },
		token.Middleware(v), token.RequireScope(token.ScopeDefinitionsRead))
	return e
}

func TestRequireScope(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgRS256)
	app := newScopedApp(f.Verifier)
	for _, tc := range []struct {
		name   string
		bearer string
		status int
	}{
		{"user token", f.mint(t).AccessToken, http.StatusNoContent},
		{"client with the scope", f.mintClient(t, token.ScopeConversationsRead, token.ScopeDefinitionsRead), http.StatusNoContent},
		{"client without the scope", f.mintClient(t, token.ScopeDefinitionsWrite), http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/defs", nil)
			req.Header.Set("Authorization", "Bearer "+tc.bearer)
			rec := httptest.NewRecorder()
			app.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tc.status, rec.Body)
			}
			if tc.status != http.StatusForbidden {
				return
			}
			if wa := rec.Header().Get("WWW-Authenticate"); wa != `Bearer error="insufficient_scope", scope="definitions:read"` {
				t.Errorf("WWW-Authenticate %q", wa)
			}
			var p problemBody
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Code != "insufficient_scope" || p.Status != 403 {
				t.Errorf("problem %+v (%v)", p, err)
			}
		})
	}
}

// Two Authorization headers never authenticate, even when both carry the
// same valid token, nor when only one of them is a bearer token.
func TestMiddlewareRefusesTwoAuthorizationHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgRS256)
	set := f.mint(t)
	app := newEchoApp(f.Verifier)
	for name, headers := range map[string][]string{
		"same token twice": {"Bearer " + set.AccessToken, "Bearer " + set.AccessToken},
		"two tokens":       {"Bearer " + set.AccessToken, "Bearer " + set.IDToken},
		"bearer and basic": {"Bearer " + set.AccessToken, "Basic dXNlcjpwYXNz"},
		"an empty and one": {"", "Bearer " + set.AccessToken},
	} {
		t.Run(name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/me", nil)
			req.Header["Authorization"] = headers
			rec := httptest.NewRecorder()
			app.ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %s", rec.Code, rec.Body)
			}
			var p problemBody
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Code != "invalid_request" {
				t.Errorf("problem %+v (%v)", p, err)
			}
			if wa := rec.Header().Get("WWW-Authenticate"); wa != `Bearer error="invalid_request"` {
				t.Errorf("WWW-Authenticate %q", wa)
			}
		})
	}
}
