package token

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/problem"
)

// Middleware authenticates every request with a bearer token verified by v.
//
// On success the *Claims are stored in the request's context.Context (read
// them with ClaimsFromContext, from echo or plain net/http code) and next
// runs. On failure it returns the *problem.Problem to answer with, for the
// application's error handling to write like any other (pkg/web): a 401
// with code invalid_token and WWW-Authenticate: Bearer
// error="invalid_token" (RFC 6750), or a 503 with Retry-After when no key
// set has been fetched yet. A request with more than one Authorization
// header is ambiguous, whatever the headers hold, and never authenticates:
// a 400 with code invalid_request (AmbiguousCredentials).
func Middleware(v *Verifier) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			req := c.Request()
			if len(req.Header.Values("Authorization")) > 1 {
				return AmbiguousCredentials()
			}
			raw, ok := bearerToken(req.Header.Get("Authorization"))
			if !ok {
				return problem.InvalidToken("missing bearer token")
			}
			claims, err := v.Verify(req.Context(), raw)
			if err != nil {
				return problemFor(err)
			}
			c.SetRequest(req.WithContext(WithClaims(req.Context(), claims)))
			return next(c)
		}
	}
}

// problemFor maps a Verify error to its response.
func problemFor(err error) *problem.Problem {
	if errors.Is(err, ErrKeysUnavailable) {
		return problem.KeysUnavailable()
	}
	var te *TokenError
	if errors.As(err, &te) {
		return problem.InvalidToken(te.Reason)
	}
	// Verify only returns the two kinds above; anything else is still a
	// token that was not accepted.
	return problem.InvalidToken("invalid token")
}

// bearerToken extracts the token of an "Authorization: Bearer <token>"
// header. The scheme is case-insensitive (RFC 7235 section 2.1).
func bearerToken(header string) (string, bool) {
	const scheme = "bearer"
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) || header[len(scheme)] != ' ' {
		return "", false
	}
	return strings.TrimSpace(header[len(scheme)+1:]), true
}

type claimsKey struct{}

// WithClaims returns a copy of ctx that carries c.
func WithClaims(ctx context.Context, c *Claims) context.Context {
	return context.WithValue(ctx, claimsKey{}, c)
}

// ClaimsFromContext returns the claims stored by Middleware (or
// WithClaims); ok is false when there are none.
func ClaimsFromContext(ctx context.Context) (*Claims, bool) {
	c, ok := ctx.Value(claimsKey{}).(*Claims)
	return c, ok && c != nil
}

// Problem codes of the bearer checks beside invalid_token (RFC 6750
// section 3.1 names all three).
const (
	CodeInvalidRequest    = "invalid_request"
	CodeInsufficientScope = "insufficient_scope"
)

// AmbiguousCredentials is the 400 for a request that carries credentials
// more than once (two Authorization headers, or a client's credentials in
// two places): which of them counts is never guessed.
func AmbiguousCredentials() *problem.Problem {
	p := problem.New(http.StatusBadRequest, CodeInvalidRequest, "The request carries more than one set of credentials.")
	p.Challenge = `Bearer error="invalid_request"`
	return p
}

// InsufficientScope is the 403 for a service client's token that lacks
// scope, with the RFC 6750 section 3.1 challenge naming it.
func InsufficientScope(scope string) *problem.Problem {
	p := problem.New(http.StatusForbidden, CodeInsufficientScope, "The token lacks the scope "+scope+".")
	p.Challenge = `Bearer error="insufficient_scope", scope="` + scope + `"`
	return p
}

// RequireScope lets a service client's token through only when it grants
// scope (else InsufficientScope); a user's token passes, since a user acts
// as themself within their account (CONTRACT.md section 9). It runs after
// Middleware, whose claims it reads; without them it refuses like
// Middleware does.
func RequireScope(scope string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			claims, ok := ClaimsFromContext(c.Request().Context())
			if !ok {
				return problem.InvalidToken("missing bearer token")
			}
			if claims.IsClient() && !claims.HasScope(scope) {
				return InsufficientScope(scope)
			}
			return next(c)
		}
	}
}
