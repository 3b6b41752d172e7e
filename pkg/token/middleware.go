package token

import (
	"context"
	"errors"
	"strings"

	"github.com/labstack/echo/v5"
)

// Middleware authenticates every request with a bearer token verified by v.
//
// On success the *Claims are stored in the request's context.Context (read
// them with ClaimsFromContext, from echo or plain net/http code) and next
// runs. On failure it returns why, for the application's one status
// decision (pkg/web's ProblemFor) to answer: a *BearerError (a 401 with
// code invalid_token and WWW-Authenticate: Bearer error="invalid_token",
// RFC 6750; or a 503 with Retry-After when no key set has been fetched
// yet), or ErrAmbiguousCredentials for a request with more than one
// Authorization header, whatever the headers hold: it never authenticates.
func Middleware(v *Verifier) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			req := c.Request()
			if len(req.Header.Values("Authorization")) > 1 {
				return ErrAmbiguousCredentials
			}
			raw, ok := bearerToken(req.Header.Get("Authorization"))
			if !ok {
				return &BearerError{Reason: "missing bearer token"}
			}
			claims, err := v.Verify(req.Context(), raw)
			if err != nil {
				return bearerError(err)
			}
			c.SetRequest(req.WithContext(WithClaims(req.Context(), claims)))
			return next(c)
		}
	}
}

// BearerError refuses a request whose bearer token is missing or was not
// accepted; Reason is safe to show. With KeysUnavailable set, no key set
// was at hand to verify it with: not the token's fault. It does not wrap
// the *TokenError, so that a service's decision never takes it for a
// refresh token it was given.
type BearerError struct {
	Reason          string
	KeysUnavailable bool
}

func (e *BearerError) Error() string { return "bearer token refused: " + e.Reason }

// bearerError is the refusal of a token Verify did not accept.
func bearerError(err error) *BearerError {
	if errors.Is(err, ErrKeysUnavailable) {
		return &BearerError{Reason: "no signing keys yet", KeysUnavailable: true}
	}
	var te *TokenError
	if errors.As(err, &te) {
		return &BearerError{Reason: te.Reason}
	}
	// Verify only returns the two kinds above; anything else is still a
	// token that was not accepted.
	return &BearerError{Reason: "invalid token"}
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

// ErrAmbiguousCredentials refuses a request that carries credentials more
// than once (two Authorization headers): which of them counts is never
// guessed.
var ErrAmbiguousCredentials = errors.New("the request carries more than one set of credentials")

// ScopeError refuses a service client's token that lacks Scope.
type ScopeError struct {
	Scope string
}

func (e *ScopeError) Error() string { return "the token lacks the scope " + e.Scope }

// RequireClientScopes lets only a service client's token through, and
// only when it grants every one of scopes (else a *ScopeError naming them
// all: a 403 insufficient_scope). A user's token is refused the same way:
// these routes act on the account's behalf, not on a user's own (webhooks,
// user management). It runs after Middleware.
func RequireClientScopes(scopes ...string) echo.MiddlewareFunc {
	all := strings.Join(scopes, " ")
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			claims, ok := ClaimsFromContext(c.Request().Context())
			if !ok {
				return &BearerError{Reason: "missing bearer token"}
			}
			if !claims.IsClient() {
				return &ScopeError{Scope: all}
			}
			for _, s := range scopes {
				if !claims.HasScope(s) {
					return &ScopeError{Scope: all}
				}
			}
			return next(c)
		}
	}
}

// ErrUserTokenRequired refuses a service client's token on a route that
// acts for the user of the token (userinfo, a password change): a client
// has no user.
var ErrUserTokenRequired = errors.New("the route needs a user's token, not a service client's")

// RequireUser lets only a user's token through (else
// ErrUserTokenRequired). It runs after Middleware.
func RequireUser(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		claims, ok := ClaimsFromContext(c.Request().Context())
		if !ok {
			return &BearerError{Reason: "missing bearer token"}
		}
		if claims.IsClient() {
			return ErrUserTokenRequired
		}
		return next(c)
	}
}

// RequireScope lets a service client's token through only when it grants
// scope (else a *ScopeError: a 403 insufficient_scope); a user's token passes, since a user acts
// as themself within their account. It runs after
// Middleware, whose claims it reads; without them it refuses like
// Middleware does.
func RequireScope(scope string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			claims, ok := ClaimsFromContext(c.Request().Context())
			if !ok {
				return &BearerError{Reason: "missing bearer token"}
			}
			if claims.IsClient() && !claims.HasScope(scope) {
				return &ScopeError{Scope: scope}
			}
			return next(c)
		}
	}
}
