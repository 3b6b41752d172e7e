// Package account is the domain of the account service (Interface A):
// accounts, their users, their integration definitions, and the rules for
// logging in. It holds types, interfaces and pure logic only; MongoDB lives
// in package mongostore, HTTP in package http, and cmd/account wires them.
package account

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Domain errors. Stores and services return them (wrapped); the HTTP layer
// maps them to problem codes.
var (
	// ErrNotFound: no such account, user or definition in the caller's scope.
	ErrNotFound = errors.New("not found")
	// ErrDuplicate: a unique name is already taken.
	ErrDuplicate = errors.New("already exists")
	// ErrInvalidCredentials: the one answer to every failed login, whatever
	// the reason, so that a caller learns nothing about which part was wrong.
	ErrInvalidCredentials = errors.New("invalid credentials")
)

// Account is a tenant. Every user and definition belongs to exactly one.
type Account struct {
	ID        string
	Name      string // unique, stored lower-case
	CreatedAt time.Time
}

// User can log in to its account.
type User struct {
	ID           string
	AccountID    string
	Username     string // unique per account, stored lower-case
	PasswordHash string // PHC string, parameters included
	// Name and Email are optional ("" when unset).
	Name      string
	Email     string
	Disabled  bool
	CreatedAt time.Time
	UpdatedAt time.Time
	// LastLoginAt is the last successful login; zero when never.
	LastLoginAt time.Time
	// TOTP is the user's second factor, nil when none is active.
	TOTP *TOTP
}

// MFAMethods is what GET /users/{id} and /userinfo say of the user's
// second factor: ["totp"] when one is active, else empty.
func (u User) MFAMethods() []string {
	if u.TOTP != nil {
		return []string{"totp"}
	}
	return []string{}
}

// Definition is an integration definition of an account.
type Definition struct {
	ID        string          `json:"id"`
	AccountID string          `json:"-"`
	Name      string          `json:"name"`
	Type      string          `json:"type"`
	Config    json.RawMessage `json:"config"` // always a JSON object
	Enabled   bool            `json:"enabled"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// Limits of accounts, users and definitions.
const (
	MaxAccountNameLen    = 200
	MaxUsernameLen       = 256
	MaxPasswordLen       = 1024
	MaxDefinitionName    = 200
	MaxDefinitionType    = 64
	MaxDefinitionConfig  = 64 << 10
	MaxDefinitionsPerAcc = 1000
)

// AccountStore persists accounts.
type AccountStore interface {
	CreateAccount(ctx context.Context, name string) (Account, error)
	AccountByName(ctx context.Context, name string) (Account, error)
	ListAccounts(ctx context.Context) ([]Account, error)
}

// UserStore persists users; every method is scoped by account, and an id
// of another account behaves as if it did not exist (ErrNotFound).
type UserStore interface {
	CreateUser(ctx context.Context, accountID, username, passwordHash string) (User, error)
	UserByName(ctx context.Context, accountID, username string) (User, error)
	UserByID(ctx context.Context, accountID, userID string) (User, error)

	// InsertUser stores a new user as given (its id and times are the
	// store's); a username taken in the account is ErrDuplicate, decided
	// by the unique index, so that of two concurrent creates one wins.
	InsertUser(ctx context.Context, u User) (User, error)
	// ListUsers returns up to limit users of the account after position
	// (zero: from the start), oldest first (created_at, then id), only
	// the one named username when it is not empty.
	ListUsers(ctx context.Context, accountID string, q UserQuery) ([]User, error)
	// UpdateUserByID applies a change to one user, by id, in one update,
	// and returns the user after it.
	UpdateUserByID(ctx context.Context, accountID, userID string, ch UserChange) (User, error)
	// DeleteUser removes a user's document.
	DeleteUser(ctx context.Context, accountID, userID string) error
	// ReplacePasswordHash sets the hash next only while the stored one is
	// still prev (a rehash at login never undoes a password change);
	// ErrNotFound when it is not.
	ReplacePasswordHash(ctx context.Context, accountID, userID, prev, next string) error
	// RecordLogin sets a user's last login time.
	RecordLogin(ctx context.Context, accountID, userID string, at time.Time) error
}

// UserQuery selects a page of an account's users.
type UserQuery struct {
	Username string // exact (normalized) match; "" for every user
	After    *UserPosition
	Limit    int
}

// UserPosition is a place in the oldest-first order of users.
type UserPosition struct {
	CreatedAt time.Time
	ID        string
}

// UserChange is what one update of a user sets; nil leaves a member as
// it is, an empty Name or Email clears it.
type UserChange struct {
	Name, Email  *string
	Disabled     *bool
	PasswordHash *string
}

// DefinitionStore persists definitions; every method is scoped by account,
// and an id of another account behaves as if it did not exist.
type DefinitionStore interface {
	CreateDefinition(ctx context.Context, d Definition) (Definition, error)
	ListDefinitions(ctx context.Context, accountID string) ([]Definition, error)
	GetDefinition(ctx context.Context, accountID, id string) (Definition, error)
	ReplaceDefinition(ctx context.Context, d Definition) (Definition, error)
	DeleteDefinition(ctx context.Context, accountID, id string) error
}

// Store is everything the service persists.
type Store interface {
	AccountStore
	UserStore
	SessionStore
	DefinitionStore
	SigningKeyStore
	LoginThrottleStore
	ClientStore
	MFAStore
	BrowserSessionStore
	AuthCodeStore
}

// PasswordHasher hashes and verifies passwords. A password is hashed in
// its NFKC form; hashes stored before that hold the form as typed.
type PasswordHasher interface {
	Hash(ctx context.Context, password string) (string, error)
	// Verify reports whether password matches hash. An error means the
	// check could not run (overload, corrupt hash), not a mismatch.
	Verify(ctx context.Context, hash, password string) (bool, error)
	// Check is Verify that also reports a match of a hash of the typed
	// form (stale), which the caller replaces with a hash of the NFKC
	// form.
	Check(ctx context.Context, hash, password string) (ok, stale bool, err error)
	// VerifyDummy spends the same time as Verify on a mismatch, for logins
	// whose account or user does not exist.
	VerifyDummy(ctx context.Context, password string) error
}
