package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/account"
)

type sessionDoc struct {
	ID        string `bson:"_id"`
	AccountID string `bson:"account_id"`
	UserID    string `bson:"user_id"`
	// ClientID is absent for a session of no client (and in sessions
	// written before clients existed).
	ClientID  string `bson:"client_id,omitempty"`
	RefreshID string `bson:"refresh_id"`
	// PreviousRefreshID and RotatedAt are absent until the first exchange.
	PreviousRefreshID string    `bson:"previous_refresh_id,omitempty"`
	RotatedAt         time.Time `bson:"rotated_at,omitempty"`
	AuthTime          time.Time `bson:"auth_time"`
	CreatedAt         time.Time `bson:"created_at"`
	ExpiresAt         time.Time `bson:"expires_at"`
	Revoked           bool      `bson:"revoked"`
}

// CreateSession stores a new session (at login).
func (s *Store) CreateSession(ctx context.Context, sess account.Session) error {
	doc := sessionDoc{
		ID: sess.ID, AccountID: sess.AccountID, UserID: sess.UserID, ClientID: sess.ClientID, RefreshID: sess.RefreshID,
		AuthTime: sess.AuthTime.UTC().Truncate(time.Millisecond), CreatedAt: s.now(),
		ExpiresAt: sess.ExpiresAt.UTC().Truncate(time.Millisecond),
	}
	if _, err := s.sessions.InsertOne(ctx, doc); err != nil {
		return mongoconn.Wrap(err, "create session")
	}
	return nil
}

// RotateRefresh is one conditional update: it matches only while the
// session is live and presented is its current refresh token, so of two
// concurrent exchanges of one token exactly one matches. A mismatch is
// diagnosed afterwards from the document; it changes nothing.
func (s *Store) RotateRefresh(ctx context.Context, accountID, id, presented, next string, now, expiresAt time.Time) error {
	res, err := s.sessions.UpdateOne(ctx,
		bson.D{
			{Key: "_id", Value: id},
			{Key: "account_id", Value: accountID},
			{Key: "refresh_id", Value: presented},
			{Key: "revoked", Value: false},
		},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "refresh_id", Value: next},
			{Key: "previous_refresh_id", Value: presented},
			{Key: "rotated_at", Value: now.UTC().Truncate(time.Millisecond)},
			{Key: "expires_at", Value: expiresAt.UTC().Truncate(time.Millisecond)},
		}}})
	if err != nil {
		return mongoconn.Wrap(err, "rotate refresh token")
	}
	if res.MatchedCount == 1 {
		return nil
	}
	current, err := s.SessionByID(ctx, accountID, id)
	switch {
	case err != nil:
		return err
	case current.Revoked:
		return fmt.Errorf("session %q: %w", id, account.ErrSessionRevoked)
	}
	return fmt.Errorf("session %q: %w", id, account.ErrRefreshNotCurrent)
}

// SessionByID returns a session of the account.
func (s *Store) SessionByID(ctx context.Context, accountID, id string) (account.Session, error) {
	var doc sessionDoc
	err := s.sessions.FindOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "account_id", Value: accountID}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.Session{}, fmt.Errorf("session %q: %w", id, account.ErrNotFound)
	}
	if err != nil {
		return account.Session{}, mongoconn.Wrap(err, "load session")
	}
	return doc.domain(), nil
}

// RevokeSession marks a session revoked; its refresh tokens stop working.
func (s *Store) RevokeSession(ctx context.Context, accountID, id string) error {
	res, err := s.sessions.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "account_id", Value: accountID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "revoked", Value: true}}}})
	if err != nil {
		return mongoconn.Wrap(err, "revoke session")
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("session %q: %w", id, account.ErrNotFound)
	}
	return nil
}

// PurgeExpiredSessions deletes sessions whose refresh token expired before
// t. It stands in for a TTL index, which the embedded development server
// does not support; the expires_at index keeps it cheap.
func (s *Store) PurgeExpiredSessions(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.sessions.DeleteMany(ctx, bson.D{{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: t.UTC()}}}})
	if err != nil {
		return 0, mongoconn.Wrap(err, "purge sessions")
	}
	return res.DeletedCount, nil
}

func (d sessionDoc) domain() account.Session {
	return account.Session{
		ID: d.ID, AccountID: d.AccountID, UserID: d.UserID, ClientID: d.ClientID, RefreshID: d.RefreshID,
		PreviousRefreshID: d.PreviousRefreshID, RotatedAt: d.RotatedAt.UTC(),
		AuthTime: d.AuthTime.UTC(), CreatedAt: d.CreatedAt.UTC(), ExpiresAt: d.ExpiresAt.UTC(), Revoked: d.Revoked,
	}
}
