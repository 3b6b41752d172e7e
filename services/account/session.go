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
	// ErrRefreshNotCurrent: the refresh token presented for an exchange is
	// not the session's current one: it was exchanged before. The store
	// changes nothing; Sessions decides between a retry within the grace
	// window and reuse.
	ErrRefreshNotCurrent = errors.New("refresh token is not the current one")
)

// Session is one login: the family of refresh tokens issued from it. Only
// the newest refresh token of a session can be exchanged, once.
type Session struct {
	ID        string // the tokens' sid claim
	AccountID string
	UserID    string
	// ClientID is the OAuth client the session was issued to (the
	// password grant with client authentication, a confidential or a
	// public client); empty for a session of no client (POST /login, or
	// the password grant without one). Only that client, or only a
	// request of no client, can refresh or end it, and the id tokens of
	// its refreshes keep naming that client in aud and azp.
	ClientID string
	// RefreshID is the jti of the one refresh token that may be exchanged.
	RefreshID string
	// PreviousRefreshID is the jti of the refresh token that the last
	// exchange spent, at RotatedAt: presented again within the refresh
	// reuse grace, it is a retry, not reuse (Sessions.ReuseGrace).
	PreviousRefreshID string
	RotatedAt         time.Time
	AuthTime          time.Time // when the user entered the password
	CreatedAt         time.Time
	// ExpiresAt is when the current refresh token expires; the session is
	// useless afterwards and may be purged.
	ExpiresAt time.Time
	Revoked   bool
	// BrowserSessionID is the browser session (single sign-on) whose
	// authorization code started this session, "" for none: ending the
	// browser session ends this one too.
	BrowserSessionID string
	// AMR is how the user authenticated (RFC 8176: "pwd", "otp"), nil
	// for a password alone: the id tokens of refreshes repeat it.
	AMR []string
}

// passwordAMR is the amr of a sign-in with a password alone.
var passwordAMR = []string{"pwd"}

func (s Session) amr() []string {
	if len(s.AMR) == 0 {
		return passwordAMR
	}
	return s.AMR
}

// SessionStore persists sessions. Each state change is one conditional
// single-document update, so two concurrent exchanges of one refresh token
// cannot both succeed.
type SessionStore interface {
	CreateSession(ctx context.Context, s Session) error
	// SessionByID returns a session of the account, or ErrNotFound.
	SessionByID(ctx context.Context, accountID, id string) (Session, error)
	// RotateRefresh exchanges refresh token presented of session id (in
	// accountID) for next, valid until expiresAt, and records presented
	// as the previous token, spent at now. It is one conditional update,
	// so of concurrent exchanges of one token exactly one succeeds. It
	// fails with ErrNotFound (no such session), ErrSessionRevoked, or
	// ErrRefreshNotCurrent when presented is not the current token; it
	// changes nothing then.
	RotateRefresh(ctx context.Context, accountID, id, presented, next string, now, expiresAt time.Time) error
	// RevokeSession revokes a session; revoking twice is not an error, an
	// unknown session is ErrNotFound.
	RevokeSession(ctx context.Context, accountID, id string) error
	// RevokeUserSessions revokes every session of a user: their refresh
	// tokens stop working at once, and their browser sessions end.
	RevokeUserSessions(ctx context.Context, accountID, userID string) error
	// DeleteUserSessions erases every session of a user, browser sessions
	// included.
	DeleteUserSessions(ctx context.Context, accountID, userID string) error
	// RevokeBrowserSessionSessions revokes every session that a code of
	// the browser session browserSessionID started (RP-Initiated Logout).
	RevokeBrowserSessionSessions(ctx context.Context, accountID, browserSessionID string) error
	// PurgeExpiredSessions deletes sessions whose refresh token expired
	// before t, and returns how many.
	PurgeExpiredSessions(ctx context.Context, t time.Time) (int64, error)
}
