package account

import (
	"context"
	"errors"
	"time"
)

// Session errors.
var (
	// ErrRefreshReused: a refresh token that was already exchanged was
	// presented again. The whole session has been revoked (OAuth 2.0
	// Security BCP, refresh token reuse detection): the thief's and the
	// owner's next refresh both fail.
	ErrRefreshReused = errors.New("refresh token reused; session revoked")
	// ErrSessionRevoked: the session was logged out or revoked.
	ErrSessionRevoked = errors.New("session revoked")
)

// Session is one login: the family of refresh tokens issued from it. Only
// the newest refresh token of a session can be exchanged, once.
type Session struct {
	ID        string // the tokens' sid claim
	AccountID string
	UserID    string
	// RefreshID is the jti of the one refresh token that may be exchanged.
	RefreshID string
	AuthTime  time.Time // when the user entered the password
	CreatedAt time.Time
	// ExpiresAt is when the current refresh token expires; the session is
	// useless afterwards and may be purged.
	ExpiresAt time.Time
	Revoked   bool
}

// SessionStore persists sessions. Each state change is one conditional
// single-document update, so two concurrent exchanges of one refresh token
// cannot both succeed.
type SessionStore interface {
	CreateSession(ctx context.Context, s Session) error
	// SessionByID returns a session of the account, or ErrNotFound.
	SessionByID(ctx context.Context, accountID, id string) (Session, error)
	// RotateRefresh exchanges refresh token presented of session id (in
	// accountID) for next, valid until expiresAt. It fails with ErrNotFound
	// (no such session), ErrSessionRevoked, or ErrRefreshReused when
	// presented is not the current token — in that case the session has
	// been revoked.
	RotateRefresh(ctx context.Context, accountID, id, presented, next string, expiresAt time.Time) error
	// RevokeSession revokes a session; revoking twice is not an error, an
	// unknown session is ErrNotFound.
	RevokeSession(ctx context.Context, accountID, id string) error
	// PurgeExpiredSessions deletes sessions whose refresh token expired
	// before t, and returns how many.
	PurgeExpiredSessions(ctx context.Context, t time.Time) (int64, error)
}
