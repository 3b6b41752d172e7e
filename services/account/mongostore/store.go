// Package mongostore implements the account service's stores on MongoDB
// (go.mongodb.org/mongo-driver/v2).
//
// Collections and the indexes that serve every query (created at start,
// idempotently, by EnsureIndexes):
//
//	accounts       {name:1} unique                 AccountByName, ListAccounts (sorted by name)
//	users          {account_id:1, username:1} unique  UserByName, ListUsers by username
//	               {account_id:1, created_at:1, _id:1}  ListUsers (oldest first, keyset); by id: _id + account_id
//	               (the second factor lives in the user's document: every change of it is by _id + account_id)
//	definitions    {account_id:1, created_at:1, _id:1}  ListDefinitions; Get/Replace/Delete filter on _id + account_id
//	signing_keys   _id = "keyring:<alg>"           SigningKeys; Create/UpdateSigningKeys (conditional on version)
//	sessions       _id = sid; {expires_at:1}       RotateRefresh, RevokeSession (by _id); PurgeExpiredSessions
//	               {account_id:1, user_id:1}       RevokeUserSessions, DeleteUserSessions
//	login_throttle _id = throttle key; {expires_at:1}  AddLoginAttempt and the rest (by _id); PurgeLoginThrottle
//	               {account_id:1, browser_session_id:1}  RevokeBrowserSessionSessions
//	clients        _id = client_id; {account_id:1, created_at:1, _id:1}  ClientByID, Rotate/SetClientDisabled (by _id); ListClients
//	settings       _id = name                      LoadOrCreateSecret (a generated key, when none is configured)
//	browser_sessions _id = hash of the cookie; {expires_at:1}  BrowserSessionByID, EndBrowserSession; PurgeExpiredBrowserSessions
//	               {account_id:1, user_id:1}       RevokeUserSessions, DeleteUserSessions (a user's browser sessions end with the rest)
//	auth_codes     _id = hash of the code; {expires_at:1}  AuthCodeByID, SpendAuthCode, RedeemAuthCode (conditional on not spent); PurgeAuthCodes
//	pending_signins _id = hash of the page's secret; {expires_at:1}  TakePendingSignIn (by _id); PurgePendingSignIns
//
// No operation spans two documents, so no transaction is needed anywhere
// (and the code runs unchanged on the embedded server used in development).
package mongostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/account"
)

// Store implements account.Store.
type Store struct {
	accounts    *mongo.Collection
	users       *mongo.Collection
	definitions *mongo.Collection
	keys        *mongo.Collection
	sessions    *mongo.Collection
	throttle    *mongo.Collection
	clients     *mongo.Collection
	settings    *mongo.Collection
	browser     *mongo.Collection
	codes       *mongo.Collection
	pending     *mongo.Collection
	now         func() time.Time
}

var _ account.Store = (*Store)(nil)

// New returns a Store on db. Call EnsureIndexes once at start.
func New(db *mongo.Database) *Store {
	return &Store{
		accounts:    db.Collection("accounts"),
		users:       db.Collection("users"),
		definitions: db.Collection("definitions"),
		keys:        db.Collection("signing_keys"),
		sessions:    db.Collection("sessions"),
		throttle:    db.Collection("login_throttle"),
		clients:     db.Collection("clients"),
		settings:    db.Collection("settings"),
		browser:     db.Collection("browser_sessions"),
		codes:       db.Collection("auth_codes"),
		pending:     db.Collection("pending_signins"),
		now:         func() time.Time { return time.Now().UTC().Truncate(time.Millisecond) },
	}
}

// EnsureIndexes creates the indexes listed in the package doc. Creating an
// index that exists with the same definition is a no-op, so every replica
// may call it at every start.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	specs := []struct {
		coll  *mongo.Collection
		model mongo.IndexModel
	}{
		{s.accounts, mongo.IndexModel{Keys: bson.D{{Key: "name", Value: 1}}, Options: options.Index().SetUnique(true).SetName("name_unique")}},
		{s.users, mongo.IndexModel{Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "username", Value: 1}}, Options: options.Index().SetUnique(true).SetName("account_username_unique")}},
		{s.users, mongo.IndexModel{Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "created_at", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName("account_created")}},
		{s.definitions, mongo.IndexModel{Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "created_at", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName("account_created")}},
		{s.sessions, mongo.IndexModel{Keys: bson.D{{Key: "expires_at", Value: 1}}, Options: options.Index().SetName("expires")}},
		{s.sessions, mongo.IndexModel{Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "user_id", Value: 1}}, Options: options.Index().SetName("account_user")}},
		{s.throttle, mongo.IndexModel{Keys: bson.D{{Key: "expires_at", Value: 1}}, Options: options.Index().SetName("expires")}},
		{s.clients, mongo.IndexModel{Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "created_at", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName("account_created")}},
		{s.sessions, mongo.IndexModel{Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "browser_session_id", Value: 1}}, Options: options.Index().SetName("account_browser_session")}},
		{s.browser, mongo.IndexModel{Keys: bson.D{{Key: "expires_at", Value: 1}}, Options: options.Index().SetName("expires")}},
		{s.browser, mongo.IndexModel{Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "user_id", Value: 1}}, Options: options.Index().SetName("account_user")}},
		{s.codes, mongo.IndexModel{Keys: bson.D{{Key: "expires_at", Value: 1}}, Options: options.Index().SetName("expires")}},
		{s.pending, mongo.IndexModel{Keys: bson.D{{Key: "expires_at", Value: 1}}, Options: options.Index().SetName("expires")}},
	}
	for _, spec := range specs {
		if _, err := spec.coll.Indexes().CreateOne(ctx, spec.model); err != nil {
			return mongoconn.Wrap(err, "create index on "+spec.coll.Name())
		}
	}
	return nil
}

// LoadOrCreateSecret returns the named secret, generating and storing it
// on first use, so that every replica shares it (the TOTP secrets' key
// when none is configured).
func (s *Store) LoadOrCreateSecret(ctx context.Context, name string, generate func() (string, error)) (string, error) {
	return mongoconn.LoadOrCreate(ctx, s.settings, name, generate)
}

type accountDoc struct {
	ID        string    `bson:"_id"`
	Name      string    `bson:"name"`
	CreatedAt time.Time `bson:"created_at"`
}

// CreateAccount stores a new account; a taken name is account.ErrDuplicate.
func (s *Store) CreateAccount(ctx context.Context, name string) (account.Account, error) {
	doc := accountDoc{ID: newID("acc"), Name: account.NormalizeName(name), CreatedAt: s.now()}
	if _, err := s.accounts.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return account.Account{}, fmt.Errorf("create account %q: %w", doc.Name, account.ErrDuplicate)
		}
		return account.Account{}, mongoconn.Wrap(err, "create account")
	}
	return doc.domain(), nil
}

// AccountByName finds an account by its (normalized) name.
func (s *Store) AccountByName(ctx context.Context, name string) (account.Account, error) {
	var doc accountDoc
	err := s.accounts.FindOne(ctx, bson.D{{Key: "name", Value: account.NormalizeName(name)}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.Account{}, fmt.Errorf("account %q: %w", name, account.ErrNotFound)
	}
	if err != nil {
		return account.Account{}, mongoconn.Wrap(err, "find account")
	}
	return doc.domain(), nil
}

// ListAccounts returns every account by name. It is an operator command,
// not an API: the number of accounts is small enough to list at once.
func (s *Store) ListAccounts(ctx context.Context) ([]account.Account, error) {
	cur, err := s.accounts.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "name", Value: 1}}))
	if err != nil {
		return nil, mongoconn.Wrap(err, "list accounts")
	}
	var docs []accountDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, mongoconn.Wrap(err, "list accounts")
	}
	out := make([]account.Account, 0, len(docs))
	for _, d := range docs {
		out = append(out, d.domain())
	}
	return out, nil
}

func (d accountDoc) domain() account.Account {
	return account.Account{ID: d.ID, Name: d.Name, CreatedAt: d.CreatedAt}
}

type userDoc struct {
	ID           string `bson:"_id"`
	AccountID    string `bson:"account_id"`
	Username     string `bson:"username"`
	PasswordHash string `bson:"password_hash"`
	// Name, Email and LastLoginAt are absent until set (and in users
	// stored before they existed).
	Name        string    `bson:"name,omitempty"`
	Email       string    `bson:"email,omitempty"`
	Disabled    bool      `bson:"disabled"`
	CreatedAt   time.Time `bson:"created_at"`
	UpdatedAt   time.Time `bson:"updated_at"`
	LastLoginAt time.Time `bson:"last_login_at,omitempty"`
	// TOTP is the active second factor, TOTPPending the secret of a begun
	// enrolment; both absent when none.
	TOTP        *totpDoc `bson:"totp,omitempty"`
	TOTPPending []byte   `bson:"totp_pending,omitempty"`
}

// CreateUser stores a new user of only a name and a password hash (see
// InsertUser); a username taken in the account is account.ErrDuplicate.
func (s *Store) CreateUser(ctx context.Context, accountID, username, passwordHash string) (account.User, error) {
	return s.InsertUser(ctx, account.User{AccountID: accountID, Username: username, PasswordHash: passwordHash})
}

// UserByName finds a user of an account.
func (s *Store) UserByName(ctx context.Context, accountID, username string) (account.User, error) {
	var doc userDoc
	err := s.users.FindOne(ctx, userKey(accountID, username)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.User{}, fmt.Errorf("user %q: %w", username, account.ErrNotFound)
	}
	if err != nil {
		return account.User{}, mongoconn.Wrap(err, "find user")
	}
	return doc.domain(), nil
}

// RecordLogin sets a user's last login time.
func (s *Store) RecordLogin(ctx context.Context, accountID, userID string, at time.Time) error {
	_, err := s.users.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: userID}, {Key: "account_id", Value: accountID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "last_login_at", Value: at.UTC().Truncate(time.Millisecond)}}}})
	if err != nil {
		return mongoconn.Wrap(err, "record login")
	}
	return nil
}

// UserByID finds a user of an account by id.
func (s *Store) UserByID(ctx context.Context, accountID, userID string) (account.User, error) {
	var doc userDoc
	err := s.users.FindOne(ctx, bson.D{{Key: "_id", Value: userID}, {Key: "account_id", Value: accountID}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.User{}, fmt.Errorf("user %q: %w", userID, account.ErrNotFound)
	}
	if err != nil {
		return account.User{}, mongoconn.Wrap(err, "find user")
	}
	return doc.domain(), nil
}

func userKey(accountID, username string) bson.D {
	return bson.D{{Key: "account_id", Value: accountID}, {Key: "username", Value: account.NormalizeName(username)}}
}

func (d userDoc) domain() account.User {
	u := account.User{
		ID: d.ID, AccountID: d.AccountID, Username: d.Username, PasswordHash: d.PasswordHash,
		Name: d.Name, Email: d.Email, Disabled: d.Disabled, CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(),
	}
	if !d.LastLoginAt.IsZero() {
		u.LastLoginAt = d.LastLoginAt.UTC()
	}
	if d.TOTP != nil {
		u.TOTP = &account.TOTP{
			Sealed: d.TOTP.Sealed, LastStep: d.TOTP.LastStep,
			RecoveryCodes: d.TOTP.RecoveryCodes, EnrolledAt: d.TOTP.EnrolledAt.UTC(),
		}
	}
	return u
}

// newID returns a prefixed random id such as "def_9f86d081884c7d659a2feaa0".
// Random rather than time-ordered: ids appear in URLs and must not reveal
// creation times or be guessable.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24
	return prefix + "_" + hex.EncodeToString(b[:])
}

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
	// BrowserSessionID and AMR are absent for a session no code started.
	BrowserSessionID string   `bson:"browser_session_id,omitempty"`
	AMR              []string `bson:"amr,omitempty"`
}

// CreateSession stores a new session (at login).
func (s *Store) CreateSession(ctx context.Context, sess account.Session) error {
	doc := sessionDoc{
		ID: sess.ID, AccountID: sess.AccountID, UserID: sess.UserID, ClientID: sess.ClientID, RefreshID: sess.RefreshID,
		AuthTime: sess.AuthTime.UTC().Truncate(time.Millisecond), CreatedAt: s.now(),
		ExpiresAt: sess.ExpiresAt.UTC().Truncate(time.Millisecond), Revoked: sess.Revoked,
		BrowserSessionID: sess.BrowserSessionID, AMR: sess.AMR,
	}
	if _, err := s.sessions.InsertOne(ctx, doc); mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("session %q: %w", sess.ID, account.ErrDuplicate)
	} else if err != nil {
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
		BrowserSessionID: d.BrowserSessionID, AMR: d.AMR,
	}
}

// throttleDoc is one login throttle counter. attempts counts the window's
// failures and pending attempts; every field is always present, so that
// filters need no $exists, except in a counter of the previous version
// (no window: adoptLegacyCounter). expires_at only grows ($max).
type throttleDoc struct {
	ID           string    `bson:"_id"`
	Window       string    `bson:"window"`
	Attempts     int       `bson:"attempts"`
	WindowEnd    time.Time `bson:"window_end"`
	Pending      int       `bson:"pending"`
	PendingUntil time.Time `bson:"pending_until"`
	LockedUntil  time.Time `bson:"locked_until"`
	Lockouts     int       `bson:"lockouts"`
	ExpiresAt    time.Time `bson:"expires_at"`
	// LegacyCount is the count of a counter of the previous version.
	LegacyCount int `bson:"count,omitempty"`
}

func (d throttleDoc) domain() account.ThrottleState {
	return account.ThrottleState{
		Window: d.Window, Failures: d.Attempts - d.Pending, WindowEnd: d.WindowEnd.UTC(),
		Pending: d.Pending, PendingUntil: d.PendingUntil.UTC(),
		LockedUntil: d.LockedUntil.UTC(), Lockouts: d.Lockouts,
	}
}

// dbTime is a time as the database keeps it (milliseconds, UTC), so that
// conditions on times read back compare equal.
func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// AddLoginAttempt implements account.LoginThrottleStore: one update in an
// open window, two for the first attempt of a window, three when neither
// applies (then a read).
func (s *Store) AddLoginAttempt(ctx context.Context, key string, a account.ThrottleAttempt) (bool, account.ThrottleState, error) {
	now := dbTime(a.Now)
	pending, pendingUntil := 0, now
	if a.Pending {
		pending, pendingUntil = 1, dbTime(a.PendingUntil)
	}
	var doc throttleDoc
	err := s.throttle.FindOneAndUpdate(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
			{Key: "locked_until", Value: bson.D{{Key: "$lte", Value: now}}},
			{Key: "attempts", Value: bson.D{{Key: "$lt", Value: a.Max}}},
			{Key: "$or", Value: bson.A{
				bson.D{{Key: "pending", Value: 0}},
				bson.D{{Key: "pending_until", Value: bson.D{{Key: "$gt", Value: now}}}},
			}},
		},
		bson.D{
			{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}, {Key: "pending", Value: pending}}},
			{Key: "$max", Value: bson.D{{Key: "pending_until", Value: pendingUntil}}},
		},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	if err == nil {
		return true, doc.domain(), nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return false, account.ThrottleState{}, mongoconn.Wrap(err, "count login attempt")
	}

	windowEnd := dbTime(a.WindowEnd)
	err = s.throttle.FindOneAndUpdate(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window_end", Value: bson.D{{Key: "$lte", Value: now}}},
			{Key: "locked_until", Value: bson.D{{Key: "$lte", Value: now}}},
		},
		bson.D{
			{Key: "$set", Value: bson.D{
				{Key: "window", Value: newID("win")}, {Key: "window_end", Value: windowEnd},
				{Key: "attempts", Value: 1}, {Key: "pending", Value: pending}, {Key: "pending_until", Value: pendingUntil},
			}},
			{Key: "$max", Value: bson.D{{Key: "expires_at", Value: windowEnd}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "locked_until", Value: time.Time{}}, {Key: "lockouts", Value: 0}}},
		},
		options.FindOneAndUpdate().SetReturnDocument(options.After).SetUpsert(true)).Decode(&doc)
	if err == nil {
		return true, doc.domain(), nil
	}
	if !mongo.IsDuplicateKeyError(err) {
		return false, account.ThrottleState{}, mongoconn.Wrap(err, "start login throttle window")
	}

	if err := s.throttle.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
		if errors.Is(err, mongo.ErrNoDocuments) {
			return false, account.ThrottleState{}, nil // reset meanwhile
		}
		return false, account.ThrottleState{}, mongoconn.Wrap(err, "read login throttle")
	}
	if doc.Window == "" {
		return false, account.ThrottleState{}, s.adoptLegacyCounter(ctx, doc)
	}
	return false, doc.domain(), nil
}

// LockLoginThrottle implements account.LoginThrottleStore. It closes the
// window (window_end = now), so that the first attempt after the lock
// starts a new one, and that condition lets one concurrent locker through.
func (s *Store) LockLoginThrottle(ctx context.Context, key string, l account.ThrottleLock) (account.ThrottleState, error) {
	now := dbTime(l.Now)
	var doc throttleDoc
	err := s.throttle.FindOneAndUpdate(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: l.Window},
			{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
			{Key: "attempts", Value: bson.D{{Key: "$gte", Value: l.Max}}},
			{Key: "pending", Value: 0},
		},
		bson.D{
			{Key: "$set", Value: bson.D{
				{Key: "locked_until", Value: dbTime(l.Until)}, {Key: "lockouts", Value: l.Lockouts},
				{Key: "window_end", Value: now}, {Key: "pending", Value: 0},
			}},
			{Key: "$max", Value: bson.D{{Key: "expires_at", Value: dbTime(l.ForgetAt)}}},
		},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return s.LoginThrottleState(ctx, key)
	}
	if err != nil {
		return account.ThrottleState{}, mongoconn.Wrap(err, "lock login throttle")
	}
	return doc.domain(), nil
}

// ReleaseLoginAttempts implements account.LoginThrottleStore.
func (s *Store) ReleaseLoginAttempts(ctx context.Context, key string, st account.ThrottleState) error {
	_, err := s.throttle.UpdateOne(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: st.Window},
			{Key: "attempts", Value: st.Failures + st.Pending},
			{Key: "pending", Value: st.Pending},
			{Key: "pending_until", Value: st.PendingUntil},
		},
		bson.D{
			{Key: "$inc", Value: bson.D{{Key: "attempts", Value: -st.Pending}}},
			{Key: "$set", Value: bson.D{{Key: "pending", Value: 0}}},
		})
	return mongoconn.Wrap(err, "release pending login attempts")
}

// adoptLegacyCounter gives a counter of the previous version (no window id,
// its attempts in "count") a window id, its attempts counted as failures.
func (s *Store) adoptLegacyCounter(ctx context.Context, doc throttleDoc) error {
	_, err := s.throttle.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: doc.ID}, {Key: "window", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{
			{Key: "$set", Value: bson.D{
				{Key: "window", Value: newID("win")}, {Key: "attempts", Value: doc.LegacyCount},
				{Key: "pending", Value: 0}, {Key: "pending_until", Value: time.Time{}},
			}},
			{Key: "$unset", Value: bson.D{{Key: "count", Value: ""}}},
		})
	return mongoconn.Wrap(err, "adopt login throttle counter")
}

// SettleLoginFailure implements account.LoginThrottleStore.
func (s *Store) SettleLoginFailure(ctx context.Context, key, window string) (account.ThrottleState, bool, error) {
	return s.updateThrottle(ctx, "count failed login attempt",
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: window},
			{Key: "pending", Value: bson.D{{Key: "$gt", Value: 0}}},
		},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "pending", Value: -1}}}})
}

// AddLoginFailure implements account.LoginThrottleStore.
func (s *Store) AddLoginFailure(ctx context.Context, key, window string, now time.Time) (account.ThrottleState, bool, error) {
	now = dbTime(now)
	return s.updateThrottle(ctx, "count failed login attempt",
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: window},
			{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
			{Key: "locked_until", Value: bson.D{{Key: "$lte", Value: now}}},
		},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}}})
}

// updateThrottle applies update to the counter filter matches and returns
// its state after; ok is false when none matches.
func (s *Store) updateThrottle(ctx context.Context, what string, filter, update bson.D) (account.ThrottleState, bool, error) {
	var doc throttleDoc
	err := s.throttle.FindOneAndUpdate(ctx, filter, update,
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.ThrottleState{}, false, nil
	}
	if err != nil {
		return account.ThrottleState{}, false, mongoconn.Wrap(err, what)
	}
	return doc.domain(), true, nil
}

// RenewLoginAttempt implements account.LoginThrottleStore.
func (s *Store) RenewLoginAttempt(ctx context.Context, key, window string, until time.Time) error {
	_, err := s.throttle.UpdateOne(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: window},
			{Key: "pending", Value: bson.D{{Key: "$gt", Value: 0}}},
		},
		bson.D{{Key: "$max", Value: bson.D{{Key: "pending_until", Value: dbTime(until)}}}})
	return mongoconn.Wrap(err, "renew login attempt")
}

// RefundLoginAttempt implements account.LoginThrottleStore.
func (s *Store) RefundLoginAttempt(ctx context.Context, key, window string) error {
	_, err := s.throttle.UpdateOne(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: window},
			{Key: "pending", Value: bson.D{{Key: "$gt", Value: 0}}},
		},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "attempts", Value: -1}, {Key: "pending", Value: -1}}}})
	return mongoconn.Wrap(err, "refund login attempt")
}

// ResetLoginThrottle implements account.LoginThrottleStore.
func (s *Store) ResetLoginThrottle(ctx context.Context, key string) error {
	_, err := s.throttle.DeleteOne(ctx, bson.D{{Key: "_id", Value: key}})
	return mongoconn.Wrap(err, "reset login throttle")
}

// LoginThrottleState implements account.LoginThrottleStore.
func (s *Store) LoginThrottleState(ctx context.Context, key string) (account.ThrottleState, error) {
	var doc throttleDoc
	err := s.throttle.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.ThrottleState{}, nil
	}
	if err != nil {
		return account.ThrottleState{}, mongoconn.Wrap(err, "read login throttle")
	}
	return doc.domain(), nil
}

// PurgeLoginThrottle implements account.LoginThrottleStore; the
// expires_at index keeps it cheap.
func (s *Store) PurgeLoginThrottle(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.throttle.DeleteMany(ctx, bson.D{{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: t.UTC()}}}})
	if err != nil {
		return 0, mongoconn.Wrap(err, "purge login throttle")
	}
	return res.DeletedCount, nil
}
