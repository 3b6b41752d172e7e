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

// browserSessionDoc is a browser session (single sign-on); _id is the
// hash of its cookie's value.
type browserSessionDoc struct {
	ID          string    `bson:"_id"`
	AccountID   string    `bson:"account_id"`
	UserID      string    `bson:"user_id"`
	AccountName string    `bson:"account_name"`
	Username    string    `bson:"username"`
	AuthTime    time.Time `bson:"auth_time"`
	CreatedAt   time.Time `bson:"created_at"`
	ExpiresAt   time.Time `bson:"expires_at"`
	AMR         []string  `bson:"amr,omitempty"`
}

// CreateBrowserSession stores a new browser session.
func (s *Store) CreateBrowserSession(ctx context.Context, b account.BrowserSession) error {
	doc := browserSessionDoc{
		ID: b.ID, AccountID: b.AccountID, UserID: b.UserID, AccountName: b.AccountName, Username: b.Username,
		AuthTime: ms(b.AuthTime), CreatedAt: ms(b.CreatedAt), ExpiresAt: ms(b.ExpiresAt), AMR: b.AMR,
	}
	if _, err := s.browser.InsertOne(ctx, doc); err != nil {
		return mongoconn.Wrap(err, "create browser session")
	}
	return nil
}

// BrowserSessionByID finds a browser session by _id.
func (s *Store) BrowserSessionByID(ctx context.Context, id string) (account.BrowserSession, error) {
	var d browserSessionDoc
	err := s.browser.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.BrowserSession{}, fmt.Errorf("browser session: %w", account.ErrNotFound)
	}
	if err != nil {
		return account.BrowserSession{}, mongoconn.Wrap(err, "find browser session")
	}
	return account.BrowserSession{
		ID: d.ID, AccountID: d.AccountID, UserID: d.UserID, AccountName: d.AccountName, Username: d.Username,
		AuthTime: d.AuthTime.UTC(), CreatedAt: d.CreatedAt.UTC(), ExpiresAt: d.ExpiresAt.UTC(), AMR: d.AMR,
	}, nil
}

// EndBrowserSession deletes a browser session by _id.
func (s *Store) EndBrowserSession(ctx context.Context, id string) error {
	if _, err := s.browser.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
		return mongoconn.Wrap(err, "end browser session")
	}
	return nil
}

// PurgeExpiredBrowserSessions deletes the browser sessions that ended
// before t, by the expires_at index.
func (s *Store) PurgeExpiredBrowserSessions(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.browser.DeleteMany(ctx, bson.D{{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: t.UTC()}}}})
	if err != nil {
		return 0, mongoconn.Wrap(err, "purge browser sessions")
	}
	return res.DeletedCount, nil
}

// RevokeBrowserSessionSessions revokes the sessions that a browser
// session's codes started, by the account_browser_session index.
func (s *Store) RevokeBrowserSessionSessions(ctx context.Context, accountID, browserSessionID string) error {
	_, err := s.sessions.UpdateMany(ctx,
		bson.D{{Key: "account_id", Value: accountID}, {Key: "browser_session_id", Value: browserSessionID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "revoked", Value: true}}}})
	if err != nil {
		return mongoconn.Wrap(err, "revoke browser session's sessions")
	}
	return nil
}

// authCodeDoc is an authorization code; _id is the hash of the code.
type authCodeDoc struct {
	ID               string    `bson:"_id"`
	ClientID         string    `bson:"client_id"`
	RedirectURI      string    `bson:"redirect_uri"`
	CodeChallenge    string    `bson:"code_challenge"`
	AccountID        string    `bson:"account_id"`
	AccountName      string    `bson:"account_name"`
	UserID           string    `bson:"user_id"`
	BrowserSessionID string    `bson:"browser_session_id"`
	SessionID        string    `bson:"session_id"`
	Nonce            string    `bson:"nonce,omitempty"`
	AuthTime         time.Time `bson:"auth_time"`
	ExpiresAt        time.Time `bson:"expires_at"`
	AMR              []string  `bson:"amr,omitempty"`
	Spent            bool      `bson:"spent"`
}

// CreateAuthCode stores a new code.
func (s *Store) CreateAuthCode(ctx context.Context, c account.AuthCode) error {
	doc := authCodeDoc{
		ID: c.ID, ClientID: c.ClientID, RedirectURI: c.RedirectURI, CodeChallenge: c.CodeChallenge,
		AccountID: c.AccountID, AccountName: c.AccountName, UserID: c.UserID, BrowserSessionID: c.BrowserSessionID,
		SessionID: c.SessionID, Nonce: c.Nonce, AuthTime: ms(c.AuthTime), ExpiresAt: ms(c.ExpiresAt), AMR: c.AMR,
	}
	if _, err := s.codes.InsertOne(ctx, doc); err != nil {
		return mongoconn.Wrap(err, "create authorization code")
	}
	return nil
}

// AuthCodeByID finds a code by _id.
func (s *Store) AuthCodeByID(ctx context.Context, id string) (account.AuthCode, error) {
	var d authCodeDoc
	err := s.codes.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.AuthCode{}, fmt.Errorf("authorization code: %w", account.ErrNotFound)
	}
	if err != nil {
		return account.AuthCode{}, mongoconn.Wrap(err, "find authorization code")
	}
	return authCodeOf(d), nil
}

// authCodeOf is the code a document stores.
func authCodeOf(d authCodeDoc) account.AuthCode {
	return account.AuthCode{
		ID: d.ID, ClientID: d.ClientID, RedirectURI: d.RedirectURI, CodeChallenge: d.CodeChallenge,
		AccountID: d.AccountID, AccountName: d.AccountName, UserID: d.UserID, BrowserSessionID: d.BrowserSessionID,
		SessionID: d.SessionID, Nonce: d.Nonce, AuthTime: d.AuthTime.UTC(), ExpiresAt: d.ExpiresAt.UTC(), AMR: d.AMR, Spent: d.Spent,
	}
}

// SpendAuthCode marks a code spent, conditional on its not being spent:
// of two concurrent exchanges one matches.
func (s *Store) SpendAuthCode(ctx context.Context, id string) error {
	res, err := s.codes.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "spent", Value: false}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "spent", Value: true}}}})
	if err != nil {
		return mongoconn.Wrap(err, "spend authorization code")
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("authorization code: %w", account.ErrConflict)
	}
	return nil
}

// RedeemAuthCode marks a code spent and returns it, in one
// findOneAndUpdate whose filter is the whole check: not spent, of the
// client, redirect URI and challenge, not expired.
func (s *Store) RedeemAuthCode(ctx context.Context, id string, r account.AuthCodeRedemption) (account.AuthCode, error) {
	var d authCodeDoc
	err := s.codes.FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "spent", Value: false}, {Key: "client_id", Value: r.ClientID},
			{Key: "redirect_uri", Value: r.RedirectURI}, {Key: "code_challenge", Value: r.CodeChallenge},
			{Key: "expires_at", Value: bson.D{{Key: "$gt", Value: r.Now.UTC()}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "spent", Value: true}}}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.AuthCode{}, fmt.Errorf("authorization code: %w", account.ErrConflict)
	}
	if err != nil {
		return account.AuthCode{}, mongoconn.Wrap(err, "redeem authorization code")
	}
	return authCodeOf(d), nil
}

// PurgeAuthCodes deletes the codes that expired before t, by the
// expires_at index.
func (s *Store) PurgeAuthCodes(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.codes.DeleteMany(ctx, bson.D{{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: t.UTC()}}}})
	if err != nil {
		return 0, mongoconn.Wrap(err, "purge authorization codes")
	}
	return res.DeletedCount, nil
}

// pendingSignInDoc is a sign-in's pending second step; _id is the hash of
// the secret its page carries.
type pendingSignInDoc struct {
	ID               string    `bson:"_id"`
	CSRFHash         string    `bson:"csrf_hash"`
	RequestHash      string    `bson:"request_hash"`
	AccountID        string    `bson:"account_id"`
	AccountName      string    `bson:"account_name"`
	UserID           string    `bson:"user_id"`
	TypedAccountName string    `bson:"typed_account_name"`
	TypedUsername    string    `bson:"typed_username"`
	PasswordOK       bool      `bson:"password_ok"`
	ExpiresAt        time.Time `bson:"expires_at"`
}

// CreatePendingSignIn stores a pending second step.
func (s *Store) CreatePendingSignIn(ctx context.Context, p account.PendingSignIn) error {
	doc := pendingSignInDoc{
		ID: p.ID, CSRFHash: p.CSRFHash, RequestHash: p.RequestHash, AccountID: p.AccountID, AccountName: p.AccountName,
		UserID: p.UserID, TypedAccountName: p.TypedAccountName, TypedUsername: p.TypedUsername, PasswordOK: p.PasswordOK,
		ExpiresAt: ms(p.ExpiresAt),
	}
	if _, err := s.pending.InsertOne(ctx, doc); err != nil {
		return mongoconn.Wrap(err, "create pending sign-in")
	}
	return nil
}

// TakePendingSignIn deletes a pending second step by _id and returns it
// (findOneAndDelete: one command, one winner).
func (s *Store) TakePendingSignIn(ctx context.Context, id string) (account.PendingSignIn, error) {
	var d pendingSignInDoc
	err := s.pending.FindOneAndDelete(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.PendingSignIn{}, fmt.Errorf("pending sign-in: %w", account.ErrNotFound)
	}
	if err != nil {
		return account.PendingSignIn{}, mongoconn.Wrap(err, "take pending sign-in")
	}
	return account.PendingSignIn{
		ID: d.ID, CSRFHash: d.CSRFHash, RequestHash: d.RequestHash, AccountID: d.AccountID, AccountName: d.AccountName,
		UserID: d.UserID, TypedAccountName: d.TypedAccountName, TypedUsername: d.TypedUsername, PasswordOK: d.PasswordOK,
		ExpiresAt: d.ExpiresAt.UTC(),
	}, nil
}

// PurgePendingSignIns deletes the pending second steps that expired
// before t, by the expires_at index.
func (s *Store) PurgePendingSignIns(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.pending.DeleteMany(ctx, bson.D{{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: t.UTC()}}}})
	if err != nil {
		return 0, mongoconn.Wrap(err, "purge pending sign-ins")
	}
	return res.DeletedCount, nil
}

// ms is a time as stored: UTC, milliseconds.
func ms(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
