package token

import "errors"

// ErrInvalidToken is wrapped by every error Verify returns for a token that
// is malformed, forged, expired, foreign or of the wrong kind. Callers
// answer it with a 401; the message of the wrapping error is safe to show.
var ErrInvalidToken = errors.New("invalid token")

// ErrKeysUnavailable is wrapped by the error Verify returns when no key set
// has been fetched yet (the JWKS host has been unreachable since start).
// The token may well be valid, so callers answer it with a 503, not a 401.
var ErrKeysUnavailable = errors.New("signing keys unavailable")

// TokenError is the error Verify returns for an invalid token. Reason is a
// short, fixed phrase (e.g. "token expired") that never contains any part of
// the token, so that it can be sent to the client as is.
type TokenError struct {
	Reason string
}

// Error implements error.
func (e *TokenError) Error() string { return "invalid token: " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalidToken) true.
func (e *TokenError) Unwrap() error { return ErrInvalidToken }

// invalid returns a *TokenError with the given reason.
func invalid(reason string) error { return &TokenError{Reason: reason} }
