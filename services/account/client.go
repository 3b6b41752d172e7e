package account

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/acme/platform/pkg/token"
)

// Service clients: backends of an account that obtain
// access tokens with the client-credentials grant. A client authenticates
// with its client_id and a secret that only it knows; the service keeps a
// hash of the secret, never the secret.
//
// Public clients (RFC 6749 section 2.1) are apps that cannot keep a secret
// (a single-page app, a mobile app): they have none, present only their
// client_id (token_endpoint_auth_method "none"), and may use only the
// grants that need a user's password or refresh token, never
// client_credentials, since anyone can present their id.

// Client errors.
var (
	// ErrInvalidClient is the one answer to every failed client
	// authentication: an unknown client, a wrong secret, a disabled client
	// and a previous secret whose overlap has ended alike (RFC 6749
	// invalid_client), so that a caller learns nothing about which it was.
	ErrInvalidClient = errors.New("invalid client")
	// ErrInvalidScope: a scope that does not exist, or that the client
	// does not hold (RFC 6749 invalid_scope).
	ErrInvalidScope = errors.New("invalid scope")
	// ErrConflict: a conditional update lost to a concurrent one (two
	// rotations of one secret at once); the caller may retry.
	ErrConflict = errors.New("changed concurrently")
	// ErrUnauthorizedClient: an authenticated client asked for a grant it
	// may not use, a public client for client_credentials (RFC 6749
	// unauthorized_client).
	ErrUnauthorizedClient = errors.New("grant not allowed for this client")
	// ErrPublicClient: an operation that needs a secret (rotating it) on a
	// public client, which has none.
	ErrPublicClient = errors.New("a public client has no secret")
)

// The scopes a service client may hold: pkg/token's,
// which the services verify.
const (
	ScopeDefinitionsRead    = token.ScopeDefinitionsRead
	ScopeDefinitionsWrite   = token.ScopeDefinitionsWrite
	ScopeConversationsRead  = token.ScopeConversationsRead
	ScopeConversationsWrite = token.ScopeConversationsWrite
	ScopeUsersRead          = token.ScopeUsersRead
	ScopeUsersWrite         = token.ScopeUsersWrite
	ScopeWebhooksManage     = token.ScopeWebhooksManage
)

// Scopes lists every scope, in the order discovery documents them.
func Scopes() []string { return token.Scopes() }

// Limits of service clients.
const (
	MaxClientNameLen = 200
	// MaxClientIDLen and MaxClientSecretLen bound what Authenticate looks
	// at: generated ids and secrets are far shorter, anything longer is
	// wrong without a lookup.
	MaxClientIDLen     = 128
	MaxClientSecretLen = 256
	// MaxClientsPerAccount bounds ListClients, an operator listing.
	MaxClientsPerAccount = 1000
)

// ClientSecretPrefix starts every client secret, so that a leaked one is
// recognisable (secret scanners, logs) and never mistaken for a password.
const ClientSecretPrefix = "cs_"

// clientSecretBytes is the entropy of a secret: 256 random bits.
const clientSecretBytes = 32

// DefaultSecretOverlap is how long, by default, a rotated-out secret keeps
// working beside the new one: a day to roll the new secret out to every
// instance of the calling backend.
const DefaultSecretOverlap = 24 * time.Hour

// ServiceClient is a backend of one account that may obtain access tokens.
type ServiceClient struct {
	ID        string // the client_id, unique across accounts
	AccountID string
	// AccountName is the account's name at creation. Account names never
	// change, so tokens take it from here without a lookup per token.
	AccountName string
	Name        string   // what the operator calls it, 1..200 chars
	Scopes      []string // sorted, distinct, each one of Scopes(); none for a public client
	// Public marks a client without a secret (see the top of this file):
	// it authenticates by its client_id alone, and never gets
	// client_credentials.
	Public bool
	// Grants are the grant types the client may use (AllowsGrant); nil
	// for a client stored before grants were recorded, which keeps what
	// it could do then (LegacyGrants).
	Grants []string
	// RedirectURIs are where the authorization endpoint may send the
	// browser back (exact match, see RedirectURIMatches);
	// PostLogoutRedirectURIs where the logout endpoint may.
	RedirectURIs           []string
	PostLogoutRedirectURIs []string
	Disabled               bool
	CreatedAt              time.Time
	UpdatedAt              time.Time
	// SecretHash is the hash of the current secret (HashClientSecret).
	SecretHash string
	// PreviousSecretHash is the hash of the secret that the last rotation
	// replaced; it keeps working until PreviousSecretExpiresAt, so that
	// the calling backend can switch without downtime. Empty when none.
	PreviousSecretHash      string
	PreviousSecretExpiresAt time.Time
}

// HasScope reports whether the client holds scope.
func (c ServiceClient) HasScope(scope string) bool { return slices.Contains(c.Scopes, scope) }

// GrantScopes returns the scopes of a token for the client: all of its
// scopes when requested is empty (the parameter omitted or empty), else
// requested (normalized), which may narrow the client's scopes but never
// widen them: a scope the client does not hold, or that does not exist,
// is ErrInvalidScope (RFC 6749 §4.4.2, §5.2). requested is the token
// request's scope parameter, parsed exactly as RFC 6749 §3.3 writes it:
// scope-tokens of %x21 / %x23-5B / %x5D-7E separated by single spaces.
// Anything else (spaces only, leading, trailing or doubled spaces, tabs,
// newlines) is ErrInvalidScope, never "every scope".
func (c ServiceClient) GrantScopes(requested string) ([]string, error) {
	if requested == "" {
		return slices.Clone(c.Scopes), nil
	}
	fields := strings.Split(requested, " ")
	for _, f := range fields {
		if !validScopeToken(f) {
			return nil, fmt.Errorf("scope parameter %q is not scope-tokens separated by single spaces: %w", requested, ErrInvalidScope)
		}
	}
	scopes, err := NormalizeScopes(fields)
	if err != nil {
		return nil, err
	}
	for _, s := range scopes {
		if !c.HasScope(s) {
			return nil, fmt.Errorf("scope %q is not granted to this client: %w", s, ErrInvalidScope)
		}
	}
	return scopes, nil
}

// credentialsMatch reports whether the presented secret, whose
// HashClientSecret is h, authenticates the client: none at all for a
// public client (a public client that sends a secret is misconfigured, and
// is refused rather than have the secret ignored), else secretMatches.
func (c ServiceClient) credentialsMatch(secret, h string, now time.Time) bool {
	matches := c.secretMatches(h, now)
	if c.Public {
		return secret == ""
	}
	return matches
}

// validScopeToken reports whether s is a scope-token of RFC 6749 §3.3:
// one or more of %x21 / %x23-5B / %x5D-7E (printable ASCII but space, "
// and \).
func validScopeToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// secretMatches reports whether h, the HashClientSecret of a presented
// secret, is the hash of the client's current secret, or of its previous
// one while the overlap lasts. Both hashes are compared every time, in
// constant time, so that which one matched (or that there is no previous
// one) does not show in the timing.
func (c ServiceClient) secretMatches(h string, now time.Time) bool {
	current := hashEqual(c.SecretHash, h)
	previous := hashEqual(c.PreviousSecretHash, h) && now.Before(c.PreviousSecretExpiresAt)
	return current || previous
}

// NormalizeScopes checks that every scope exists and returns them sorted
// and without duplicates. An empty list is ErrInvalidScope: a client
// without a scope could do nothing.
func NormalizeScopes(scopes []string) ([]string, error) {
	out := make([]string, 0, len(scopes))
	for _, s := range scopes {
		s = strings.TrimSpace(s)
		if !slices.Contains(Scopes(), s) {
			return nil, fmt.Errorf("unknown scope %q (known: %s): %w", s, strings.Join(Scopes(), ", "), ErrInvalidScope)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scope given: %w", ErrInvalidScope)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// NewServiceClient returns a client of acc to store (the store assigns its
// ID and times) and its secret, to hand to the operator once: the client
// keeps only its hash.
func NewServiceClient(acc Account, name string, scopes []string) (ServiceClient, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > MaxClientNameLen {
		return ServiceClient{}, "", fmt.Errorf("a client name must have 1 to %d characters", MaxClientNameLen)
	}
	scopes, err := NormalizeScopes(scopes)
	if err != nil {
		return ServiceClient{}, "", err
	}
	secret := NewClientSecret()
	return ServiceClient{
		AccountID: acc.ID, AccountName: acc.Name, Name: name, Scopes: scopes,
		SecretHash: HashClientSecret(secret), Grants: DefaultGrants(false, false),
	}, secret, nil
}

// NewPublicClient returns a public client of acc to store (the store
// assigns its ID and times): no secret, no scope (its tokens are a user's,
// which act as the user).
func NewPublicClient(acc Account, name string) (ServiceClient, error) {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > MaxClientNameLen {
		return ServiceClient{}, fmt.Errorf("a client name must have 1 to %d characters", MaxClientNameLen)
	}
	return ServiceClient{AccountID: acc.ID, AccountName: acc.Name, Name: name, Scopes: []string{}, Public: true,
		Grants: DefaultGrants(true, false)}, nil
}

// NewClientSecret returns a new secret: ClientSecretPrefix and 256 random
// bits, base64url without padding (URL-, header- and form-safe).
func NewClientSecret() string {
	var b [clientSecretBytes]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24
	return ClientSecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// clientHashScheme names the hash in stored values, so that another can be
// introduced later beside it.
const clientHashScheme = "sha256:"

// HashClientSecret is what is stored of a secret: its SHA-256, hex.
//
// Unlike passwords, secrets are 256 random bits chosen by the service: no
// dictionary, salt-precomputed table or GPU farm gets anywhere near
// guessing one from its hash, so a slow, memory-hard hash (argon2id) would
// add nothing but cost (tens of milliseconds and 19 MiB per token, the
// throughput of the token endpoint capped by the hashing concurrency
// limit). One SHA-256, a microsecond, is the standard for high-entropy
// secrets (GitHub tokens, API keys); a salt or pepper would likewise guard
// against nothing that 256 bits do not. See docs/decisions.md, "Service
// clients".
func HashClientSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return clientHashScheme + hex.EncodeToString(sum[:])
}

// hashEqual compares two stored hashes in constant time; an empty stored
// hash matches nothing.
func hashEqual(stored, computed string) bool {
	return stored != "" && subtle.ConstantTimeCompare([]byte(stored), []byte(computed)) == 1
}

// dummySecretHash is compared against when the client does not exist, so
// that an unknown client_id costs what a wrong secret costs. No secret has
// it: that would take a SHA-256 preimage.
const dummySecretHash = clientHashScheme + "0000000000000000000000000000000000000000000000000000000000000000"

// ClientStore persists service clients. Reads and writes by operators are
// scoped by account; only ClientByID is not, because a client
// authenticates before anyone knows its account.
type ClientStore interface {
	// CreateClient stores c with a new ID and creation time, and returns it.
	CreateClient(ctx context.Context, c ServiceClient) (ServiceClient, error)
	// ClientByID returns a client of any account, or ErrNotFound.
	ClientByID(ctx context.Context, clientID string) (ServiceClient, error)
	// ListClients returns the clients of an account, oldest first; an
	// empty slice when none.
	ListClients(ctx context.Context, accountID string) ([]ServiceClient, error)
	// RotateClientSecret makes nextHash the client's secret and keeps the
	// current one, currentHash, working until previousExpiresAt (replacing
	// an older previous secret). It is one conditional update: when the
	// client's secret is no longer currentHash (a concurrent rotation) it
	// changes nothing and returns ErrConflict. An unknown client, or one
	// of another account, is ErrNotFound.
	RotateClientSecret(ctx context.Context, accountID, clientID, currentHash, nextHash string, previousExpiresAt time.Time) error
	// SetClientDisabled disables or re-enables a client of an account.
	SetClientDisabled(ctx context.Context, accountID, clientID string, disabled bool) error
	// UpdateClientRegistration sets a client's grants and redirect URIs
	// (the operator's update-client); an unknown client, or one of
	// another account, is ErrNotFound.
	UpdateClientRegistration(ctx context.Context, accountID, clientID string, r ClientRegistration) error
}

// ClientThrottledError is returned by ClientAuthenticator.Authenticate
// while the client id is locked after too many failed authentications:
// the request is refused (429) whatever the secret.
type ClientThrottledError struct {
	RetryAfter time.Duration
}

func (e *ClientThrottledError) Error() string {
	return fmt.Sprintf("too many failed client authentications; retry after %v", e.RetryAfter)
}

// ClientAuthenticator authenticates service clients.
type ClientAuthenticator struct {
	Clients ClientStore
	// Throttle counts failed authentications per client id, under its
	// Policy.User limit, in the same store as the login counters (so
	// across replicas). Nil throttles nothing.
	Throttle *LoginThrottle
	// Now is the clock that ends a previous secret's overlap; nil means
	// time.Now.
	Now func() time.Time
	// Cache remembers recent successful authentications (see
	// ClientCache); nil reads the store every time.
	Cache *ClientCache
}

// Authenticate returns the client whose id and secret are given; secret is
// empty when none was presented, the one right answer for a public client
// and a wrong one for any other. An unknown client, a wrong secret, a
// disabled client, a previous secret past its overlap and a secret sent
// by a public client are all the same ErrInvalidClient, and each costs
// one hash comparison. While the client id is locked it returns a
// *ClientThrottledError before looking at the secret. Any other error
// means the check could not run (the database): the caller must refuse.
//
// Throttling counts failures only, when they happen, and resets the count
// on a success; unlike a login it takes no place in the window for an
// attempt in flight. That reservation exists so that parallel guesses at a
// password cannot overrun the limit; a 256-bit secret cannot be guessed
// with any number of extra tries, and a successful authentication then
// costs one counter read, not two writes (the token endpoint's speed).
// With a Cache, a client that authenticated with the same secret within
// its TTL is answered without reading the store at all.
func (a ClientAuthenticator) Authenticate(ctx context.Context, clientID, secret string) (ServiceClient, error) {
	secretHash := HashClientSecret(secret)
	if c, ok := a.Cache.get(clientID, secretHash, a.now()); ok {
		return c, nil
	}
	key := ClientThrottleKey(clientID)
	var before ThrottleState
	if a.throttled() {
		st, err := a.Throttle.Store.LoginThrottleState(ctx, key)
		if err != nil {
			return ServiceClient{}, fmt.Errorf("authenticate client: %w", err)
		}
		if now := a.Throttle.now(); st.Locked(now) {
			return ServiceClient{}, &ClientThrottledError{RetryAfter: waitFor(st, now)}
		}
		before = st
	}
	c, ok, err := a.verify(ctx, clientID, secret, secretHash)
	if err != nil {
		return ServiceClient{}, err
	}
	if !ok {
		a.Cache.forget(clientID)
		if err := a.failed(ctx, key); err != nil {
			return ServiceClient{}, err
		}
		return ServiceClient{}, ErrInvalidClient
	}
	if a.throttled() && (before.Failures > 0 || before.Lockouts > 0) {
		if err := a.reset(ctx, key); err != nil {
			return ServiceClient{}, err
		}
	}
	a.Cache.put(c, secretHash, a.now())
	return c, nil
}

// verify looks the client up and checks the secret, whose
// HashClientSecret is secretHash; ok is false for every reason that is
// ErrInvalidClient.
func (a ClientAuthenticator) verify(ctx context.Context, clientID, secret, secretHash string) (c ServiceClient, ok bool, err error) {
	if clientID == "" || len(clientID) > MaxClientIDLen || len(secret) > MaxClientSecretLen {
		_ = ServiceClient{SecretHash: dummySecretHash}.secretMatches(secretHash, time.Time{})
		return ServiceClient{}, false, nil
	}
	c, err = a.Clients.ClientByID(ctx, clientID)
	if errors.Is(err, ErrNotFound) {
		_ = ServiceClient{SecretHash: dummySecretHash}.secretMatches(secretHash, time.Time{})
		return ServiceClient{}, false, nil
	}
	if err != nil {
		return ServiceClient{}, false, fmt.Errorf("authenticate client: %w", err)
	}
	matches := c.credentialsMatch(secret, secretHash, a.now())
	return c, matches && !c.Disabled, nil
}

func (a ClientAuthenticator) throttled() bool {
	return a.Throttle != nil && a.Throttle.Policy.User.Enabled()
}

// failed counts a failure of key (locking it at the limit), even when the
// caller has gone away. Lease 0: counted as failed at once.
func (a ClientAuthenticator) failed(ctx context.Context, key string) error {
	if !a.throttled() {
		return nil
	}
	th := a.Throttle
	ctx, cancel := th.settleContext(ctx)
	defer cancel()
	if _, _, err := (ThrottleCounters{th.Store}).Take(ctx, key, th.now(), th.Policy.User, 0); err != nil {
		return fmt.Errorf("client throttle: %w", err)
	}
	return nil
}

func (a ClientAuthenticator) reset(ctx context.Context, key string) error {
	ctx, cancel := a.Throttle.settleContext(ctx)
	defer cancel()
	if err := a.Throttle.Store.ResetLoginThrottle(ctx, key); err != nil {
		return fmt.Errorf("client throttle: %w", err)
	}
	return nil
}

func (a ClientAuthenticator) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// ClientThrottleKey is the counter key of a client id as presented. Like
// UserThrottleKey it is a hash: ids that do not exist get counters too, and
// what a caller typed is not stored.
func ClientThrottleKey(clientID string) string {
	sum := sha256.Sum256([]byte(clientID))
	return "client:" + hex.EncodeToString(sum[:])
}

// RotateClientSecret gives a client of an account a new secret and returns
// it; the current secret keeps working for overlap after now (0: it stops
// at once), replacing any older previous secret.
func RotateClientSecret(ctx context.Context, clients ClientStore, accountID, clientID string, overlap time.Duration, now time.Time) (string, error) {
	if overlap < 0 {
		return "", fmt.Errorf("rotate client secret: the overlap %v is negative", overlap)
	}
	c, err := clients.ClientByID(ctx, clientID)
	if err == nil && c.AccountID != accountID {
		err = fmt.Errorf("client %q: %w", clientID, ErrNotFound)
	}
	if err == nil && c.Public {
		err = fmt.Errorf("client %q: %w", clientID, ErrPublicClient)
	}
	if err != nil {
		return "", fmt.Errorf("rotate client secret: %w", err)
	}
	secret := NewClientSecret()
	if err := clients.RotateClientSecret(ctx, accountID, clientID, c.SecretHash, HashClientSecret(secret), now.Add(overlap)); err != nil {
		return "", fmt.Errorf("rotate client secret: %w", err)
	}
	return secret, nil
}

// DefaultClientCacheSize bounds a ClientCache: far more service clients
// than one account service answers for at once.
const DefaultClientCacheSize = 10_000

// ClientCache remembers, for TTL, the service clients that authenticated
// on this replica and the hash of the secret they presented. A backend
// fetching tokens in a burst (its instances starting at once, a client
// without a token cache) then costs two database reads (the client and
// its throttle counter) per TTL instead of two per token: the token
// endpoint's cost is the signature.
//
// What it costs: disabling a client or ending a previous secret's overlap
// (the operator commands, in another process) takes effect on a replica
// up to TTL later, and a lock set by failures on another replica too. A
// failed authentication on this replica forgets the client at once, so
// its next request reads the store (and sees a lock). An entry of a
// previous secret never outlives that secret's overlap.
//
// A nil *ClientCache remembers nothing. Safe for concurrent use.
type ClientCache struct {
	ttl     time.Duration
	max     int
	mu      sync.Mutex
	entries map[string]cachedClient // by client id
}

type cachedClient struct {
	client     ServiceClient
	secretHash string // HashClientSecret of the secret that authenticated
	expires    time.Time
}

// NewClientCache returns a cache whose entries last ttl, holding at most
// max clients (DefaultClientCacheSize when max <= 0); nil, which caches
// nothing, when ttl <= 0.
func NewClientCache(ttl time.Duration, max int) *ClientCache {
	if ttl <= 0 {
		return nil
	}
	if max <= 0 {
		max = DefaultClientCacheSize
	}
	return &ClientCache{ttl: ttl, max: max, entries: map[string]cachedClient{}}
}

// get returns the client remembered for clientID when secretHash is the
// hash it authenticated with and the entry has not expired at now.
func (c *ClientCache) get(clientID, secretHash string, now time.Time) (ServiceClient, bool) {
	if c == nil {
		return ServiceClient{}, false
	}
	c.mu.Lock()
	e, ok := c.entries[clientID]
	c.mu.Unlock()
	if !ok || !now.Before(e.expires) || subtle.ConstantTimeCompare([]byte(e.secretHash), []byte(secretHash)) != 1 {
		return ServiceClient{}, false
	}
	return e.client, true
}

// put remembers client, authenticated at now by the secret whose hash is
// secretHash, until now + TTL or the end of that secret's overlap when it
// is the previous one (a public client, authenticated by no secret, until
// now + TTL).
func (c *ClientCache) put(client ServiceClient, secretHash string, now time.Time) {
	if c == nil {
		return
	}
	expires := now.Add(c.ttl)
	if !client.Public && !hashEqual(client.SecretHash, secretHash) && client.PreviousSecretExpiresAt.Before(expires) {
		expires = client.PreviousSecretExpiresAt
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[client.ID]; !ok && len(c.entries) >= c.max {
		c.evict(now)
	}
	c.entries[client.ID] = cachedClient{client: client, secretHash: secretHash, expires: expires}
}

// lookup returns the client remembered for clientID, whatever secret it
// was remembered with, while its entry lasts: for a caller that needs the
// client's record, not its authentication (the authorization endpoint).
func (c *ClientCache) lookup(clientID string, now time.Time) (ServiceClient, bool) {
	if c == nil {
		return ServiceClient{}, false
	}
	c.mu.Lock()
	e, ok := c.entries[clientID]
	c.mu.Unlock()
	if !ok || !now.Before(e.expires) {
		return ServiceClient{}, false
	}
	return e.client, true
}

// remember keeps client, read from the store at now, for lookup until
// now + TTL; no secret matches the entry.
func (c *ClientCache) remember(client ServiceClient, now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[client.ID]; !ok && len(c.entries) >= c.max {
		c.evict(now)
	}
	c.entries[client.ID] = cachedClient{client: client, expires: now.Add(c.ttl)}
}

// forget drops what is remembered of clientID.
func (c *ClientCache) forget(clientID string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.entries, clientID)
	c.mu.Unlock()
}

// evict makes room for one entry: the expired ones go, and when none has
// expired, an arbitrary one (a full cache only costs store reads).
// Called with c.mu held.
func (c *ClientCache) evict(now time.Time) {
	for id, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, id)
		}
	}
	for id := range c.entries {
		if len(c.entries) < c.max {
			return
		}
		delete(c.entries, id)
	}
}
