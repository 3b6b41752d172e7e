package http_test

import (
	"context"
	"testing"
	"time"

	"github.com/acme/platform/pkg/secretbox"
	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
	"github.com/acme/platform/services/account/mongostore"
	"github.com/acme/platform/services/account/password"
)

// tokenKit is the shared token fixture (tokentest) in the shape the
// handler's dependencies take.
type tokenKit struct {
	ring            *token.Keyring
	keys            token.KeyringProvider
	issuer          *token.Issuer
	verifier        *token.Verifier // id and access tokens
	refreshVerifier *token.Verifier
}

func newTokenKit(t testing.TB, alg string) tokenKit {
	t.Helper()
	return newTokenKitFor(t, alg, issuerURL)
}

// newTokenKitFor is newTokenKit for another issuer URL (a test server's,
// when clients read the endpoints from discovery).
func newTokenKitFor(t testing.TB, alg, issuerURL string) tokenKit {
	t.Helper()
	f := tokentest.New(t, tokentest.Options{Alg: alg, Issuer: issuerURL, Audience: []string{audience}})
	return tokenKit{ring: f.Keyring, keys: f.Keys, issuer: f.Issuer, verifier: f.Verifier, refreshVerifier: f.RefreshVerifier}
}

// testSettleTimeout replaces the throttle's 5 s bound on the updates after
// a password check in these tests: the embedded store that make test
// shares between all its test binaries runs one command at a time, and
// under a full run a burst of 20 logins has seen an update wait longer
// than 5 s in its queue (a 503, as production rightly answers a database
// that slow). The throttle's clock is faked here, so the longer bound
// cannot let an attempt's lease run out.
const testSettleTimeout = time.Minute

// cheapHasher hashes with tiny argon2 parameters: tests exercise the flow,
// not the cost.
func cheapHasher(t testing.TB) *password.Hasher {
	t.Helper()
	h, err := password.New(password.Options{Params: password.Params{Memory: 64, Iterations: 1, Parallelism: 1, SaltLen: 16, KeyLen: 32}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// sessions is the account.Sessions of a test server on store: strict
// refresh (no retry grace) and no throttle unless the test sets them.
func (k tokenKit) sessions(store *mongostore.Store, hasher account.PasswordHasher, throttle *account.LoginThrottle) *account.Sessions {
	return &account.Sessions{
		Authenticator: account.Authenticator{Accounts: store, Users: store, Hasher: hasher},
		Throttle:      throttle,
		Clients:       account.ClientAuthenticator{Clients: store, Throttle: throttle},
		Store:         store,
		Issuer:        k.issuer,
		RefreshTokens: k.refreshVerifier,
	}
}

// newStore is a store on a fresh database, with its indexes.
func newStore(t testing.TB) *mongostore.Store {
	t.Helper()
	store := mongostore.New(mongotest.New(t))
	if err := store.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	return store
}

// addUser stores a user of the account with password pw.
func addUser(t testing.TB, store *mongostore.Store, hasher account.PasswordHasher, accountID, username, pw string) account.User {
	t.Helper()
	ctx := context.Background()
	hash, err := hasher.Hash(ctx, pw)
	if err != nil {
		t.Fatal(err)
	}
	u, err := store.CreateUser(ctx, accountID, username, hash)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// userManagement is the user management of a test server on store, under
// the shipped password policy, wired into sessions (for POST /password),
// with second factors (sessions.MFA: sealed under a random key, on the
// real clock, throttled by the sessions' throttle).
func userManagement(t testing.TB, store *mongostore.Store, hasher account.PasswordHasher, sessions *account.Sessions) *account.Users {
	t.Helper()
	policy, err := account.LoadPasswordPolicy()
	if err != nil {
		t.Fatal(err)
	}
	users := &account.Users{Store: store, Sessions: store, Throttle: store, Hasher: hasher, Policy: policy}
	sessions.Users = users
	sessions.MFA = newTestMFA(t, store, hasher, sessions.Throttle, nil)
	return users
}

// newTestMFA is the second factor of a test server on store: secrets
// sealed under a random key, codes on the clock now (nil: the real one).
func newTestMFA(t testing.TB, store *mongostore.Store, hasher account.PasswordHasher, throttle *account.LoginThrottle, now func() time.Time) *account.MFA {
	t.Helper()
	raw, _ := secretbox.NewKey()
	key, _ := secretbox.ParseKey(raw)
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return &account.MFA{Store: store, Users: store, Sessions: store, Box: box, Issuer: "Acme Platform", Hasher: hasher, Throttle: throttle, Now: now}
}

// setUserDisabled disables or re-enables a user in the store alone, as an
// operator's change that the service has not acted on (its sessions stay).
func setUserDisabled(t testing.TB, store *mongostore.Store, accountID, username string, disabled bool) {
	t.Helper()
	ctx := context.Background()
	u, err := store.UserByName(ctx, accountID, username)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.UpdateUserByID(ctx, accountID, u.ID, account.UserChange{Disabled: &disabled}); err != nil {
		t.Fatal(err)
	}
}

// authorizations is the authorization code flow of a test server on
// store, whose issuer URL is issuer.
func (k tokenKit) authorizations(store *mongostore.Store, sessions *account.Sessions, issuer string) *account.Authorizations {
	return &account.Authorizations{Sessions: sessions, Clients: store, Browser: store, Codes: store,
		IDTokens: k.verifier, Issuer: issuer}
}

// withAuthz adds the authorization code flow on store to d.
func (k tokenKit) withAuthz(store *mongostore.Store, d accounthttp.Deps) accounthttp.Deps {
	d.Authorizations = k.authorizations(store, d.Sessions, d.IssuerURL)
	return d
}
