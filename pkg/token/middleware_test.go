package token_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
)

// newEchoApp serves GET /me behind the middleware, in the services' Echo
// (pkg/web), which writes the problems the middleware returns.
func newEchoApp(v *token.Verifier) *echo.Echo {
	e := web.New(web.Config{})
	e.GET("/me", func(c *echo.Context) error {
		claims, ok := token.ClaimsFromContext(c.Request().Context())
		if !ok {
			return c.String(http.StatusInternalServerError, "no claims in context")
		}
		return c.JSON(http.StatusOK, map[string]string{"sub": claims.Subject, "account_id": claims.AccountID, "use": string(claims.Use)})
	}, token.Middleware(v))
	return e
}

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgRS256)
	set := f.mint(t)
	app := newEchoApp(f.Verifier)

	for _, tc := range []struct {
		name       string
		header     string
		status     int
		detail     string
		wantClaims string
	}{
		{"no header", "", http.StatusUnauthorized, "missing bearer token", ""},
		{"other scheme", "Basic dXNlcjpwYXNz", http.StatusUnauthorized, "missing bearer token", ""},
		{"scheme only", "Bearer", http.StatusUnauthorized, "missing bearer token", ""},
		{"empty token", "Bearer ", http.StatusUnauthorized, "empty token", ""},
		{"garbage", "Bearer not-a-token", http.StatusUnauthorized, "malformed token", ""},
		{"refresh token", "Bearer " + set.RefreshToken, http.StatusUnauthorized, "token use not accepted", ""},
		{"access token", "Bearer " + set.AccessToken, http.StatusOK, "", "access"},
		{"id token, lower-case scheme", "bearer " + set.IDToken, http.StatusOK, "", "id"},
		{"upper-case scheme", "BEARER " + set.AccessToken, http.StatusOK, "", "access"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/me", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			rec := httptest.NewRecorder()
			app.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tc.status, rec.Body)
			}
			if tc.status == http.StatusOK {
				var got map[string]string
				if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
					t.Fatal(err)
				}
				if got["sub"] != "user-1" || got["account_id"] != "acct-1" || got["use"] != tc.wantClaims {
					t.Errorf("handler saw %v", got)
				}
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			if wa := rec.Header().Get("WWW-Authenticate"); wa != `Bearer error="invalid_token"` {
				t.Errorf("WWW-Authenticate %q", wa)
			}
			var p problemBody
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if p.Code != "invalid_token" || p.Status != 401 || p.Detail != tc.detail || p.Type == "" || p.Title == "" {
				t.Errorf("problem %+v", p)
			}
		})
	}
}

func TestMiddlewareKeysUnavailable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgRS256)
	v, err := token.NewVerifier(token.KeyringKeySet(token.StaticKeyring(nil)), token.VerifierConfig{Issuer: testIssuer, Audience: []string{testAudience}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/me", nil)
	req.Header.Set("Authorization", "Bearer "+f.mint(t).AccessToken)
	rec := httptest.NewRecorder()
	newEchoApp(v).ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "5" ||
		rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d headers %v body %s", rec.Code, rec.Header(), rec.Body)
	}
	var p problemBody
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Code != "service_unavailable" {
		t.Errorf("problem %+v (%v)", p, err)
	}
}

func TestClaimsContext(t *testing.T) {
	t.Parallel()
	if _, ok := token.ClaimsFromContext(context.Background()); ok {
		t.Error("claims in an empty context")
	}
	c := &token.Claims{Subject: "u"}
	got, ok := token.ClaimsFromContext(token.WithClaims(context.Background(), c))
	if !ok || got != c {
		t.Errorf("got %v, %v", got, ok)
	}
}
