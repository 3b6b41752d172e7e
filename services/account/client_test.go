package account_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/services/account"
	"github.com/acme/platform/services/account/mongostore"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// clock is a settable time for the throttle and the secret overlap.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time { return c.t }

// clientFixture is a store with an account "acme" and one client of it.
type clientFixture struct {
	store  *mongostore.Store
	acc    account.Account
	client account.ServiceClient
	secret string
	clock  *clock
	auth   account.ClientAuthenticator
}

var clientTestLimit = account.ThrottleLimit{MaxFailures: 3, Window: time.Minute, Lockout: 10 * time.Minute, MaxLockout: time.Hour}

func newClientFixture(t *testing.T) clientFixture {
	t.Helper()
	ctx := context.Background()
	store := mongostore.New(mongotest.New(t))
	if err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	acc, err := store.CreateAccount(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	c, secret, err := account.NewServiceClient(acc, "billing", []string{account.ScopeConversationsRead})
	if err != nil {
		t.Fatal(err)
	}
	c, err = store.CreateClient(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	return clientFixture{
		store: store, acc: acc, client: c, secret: secret, clock: clk,
		auth: account.ClientAuthenticator{
			Clients:  store,
			Throttle: &account.LoginThrottle{Store: store, Policy: account.ThrottlePolicy{User: clientTestLimit}, Now: clk.Now},
			Now:      clk.Now,
		},
	}
}

func (f clientFixture) wantInvalid(t *testing.T, what, clientID, secret string) {
	t.Helper()
	c, err := f.auth.Authenticate(context.Background(), clientID, secret)
	if !errors.Is(err, account.ErrInvalidClient) || c.ID != "" {
		t.Errorf("%s: Authenticate = %+v, %v; want ErrInvalidClient and no client", what, c, err)
	}
}

func (f clientFixture) wantValid(t *testing.T, what, secret string) {
	t.Helper()
	c, err := f.auth.Authenticate(context.Background(), f.client.ID, secret)
	if err != nil || c.ID != f.client.ID || c.AccountID != f.acc.ID || c.AccountName != "acme" ||
		!slices.Equal(c.Scopes, []string{account.ScopeConversationsRead}) {
		t.Fatalf("%s: Authenticate = %+v, %v; want the client", what, c, err)
	}
}

func TestClientSecretFormat(t *testing.T) {
	a, b := account.NewClientSecret(), account.NewClientSecret()
	if a == b {
		t.Fatal("two secrets are equal")
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(a, "cs_"))
	if !strings.HasPrefix(a, "cs_") || err != nil || len(raw)*8 < 256 {
		t.Fatalf("secret %q: want cs_ and at least 256 bits of base64url (decoded %d bytes, %v)", a, len(raw), err)
	}
	h := account.HashClientSecret(a)
	if h == account.HashClientSecret(b) || strings.Contains(h, a) || h != account.HashClientSecret(a) {
		t.Fatalf("HashClientSecret(%q) = %q: want a deterministic hash that does not contain the secret", a, h)
	}
}

func TestNewServiceClientValidates(t *testing.T) {
	acc := account.Account{ID: "acc_1", Name: "acme"}
	c, secret, err := account.NewServiceClient(acc, " billing ", []string{"conversations:write", "definitions:read", "conversations:write"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "billing" || c.AccountID != "acc_1" || c.AccountName != "acme" || c.SecretHash != account.HashClientSecret(secret) ||
		!slices.Equal(c.Scopes, []string{"conversations:write", "definitions:read"}) {
		t.Fatalf("NewServiceClient = %+v", c)
	}
	for _, tc := range []struct {
		name   string
		scopes []string
	}{
		{"", []string{"definitions:read"}},
		{strings.Repeat("x", account.MaxClientNameLen+1), []string{"definitions:read"}},
		{"ok", nil},
		{"ok", []string{"definitions:read", "admin"}},
		{"ok", []string{"openid"}},
	} {
		if _, _, err := account.NewServiceClient(acc, tc.name, tc.scopes); err == nil {
			t.Errorf("NewServiceClient(%.10q, %v) accepted", tc.name, tc.scopes)
		}
	}
}

func TestGrantScopesNarrowsNeverWidens(t *testing.T) {
	c := account.ServiceClient{Scopes: []string{"conversations:read", "definitions:read"}}
	for _, tc := range []struct {
		requested string
		want      []string
		err       bool
	}{
		{"", []string{"conversations:read", "definitions:read"}, false},
		{"   ", nil, true}, // RFC 6749 §3.3: scope-tokens separated by single spaces, nothing else
		{" definitions:read", nil, true},
		{"definitions:read ", nil, true},
		{"definitions:read  conversations:read", nil, true},
		{"definitions:read\tconversations:read", nil, true},
		{"definitions:read\nconversations:read", nil, true},
		{"definitions:read\u00a0conversations:read", nil, true},
		{"definitions:read", []string{"definitions:read"}, false},
		{"definitions:read conversations:read definitions:read", []string{"conversations:read", "definitions:read"}, false},
		{"definitions:write", nil, true},
		{"definitions:read openid", nil, true},
	} {
		got, err := c.GrantScopes(tc.requested)
		if tc.err {
			if !errors.Is(err, account.ErrInvalidScope) {
				t.Errorf("GrantScopes(%q) = %v, %v; want ErrInvalidScope", tc.requested, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("GrantScopes(%q) = %v, %v; want %v", tc.requested, got, err, tc.want)
		}
	}
}

func TestClientAuthenticateFailsUniformly(t *testing.T) {
	f := newClientFixture(t)
	f.auth.Throttle = nil // more failures than its limit; throttling has its own test
	f.wantValid(t, "right secret", f.secret)
	f.wantInvalid(t, "wrong secret", f.client.ID, account.NewClientSecret())
	f.wantInvalid(t, "empty secret", f.client.ID, "")
	f.wantInvalid(t, "unknown client", "cli_000000000000000000000000", f.secret)
	f.wantInvalid(t, "empty client id", "", f.secret)
	f.wantInvalid(t, "overlong client id", strings.Repeat("c", account.MaxClientIDLen+1), f.secret)
	f.wantInvalid(t, "overlong secret", f.client.ID, f.secret+strings.Repeat("x", account.MaxClientSecretLen))
	f.wantInvalid(t, "the secret's hash", f.client.ID, f.client.SecretHash)

	ctx := context.Background()
	if err := f.store.SetClientDisabled(ctx, f.acc.ID, f.client.ID, true); err != nil {
		t.Fatal(err)
	}
	f.wantInvalid(t, "disabled client, right secret", f.client.ID, f.secret)
	if err := f.store.SetClientDisabled(ctx, f.acc.ID, f.client.ID, false); err != nil {
		t.Fatal(err)
	}
	f.wantValid(t, "re-enabled client", f.secret)
}

func TestRotatedSecretOverlap(t *testing.T) {
	f := newClientFixture(t)
	ctx := context.Background()
	next, err := account.RotateClientSecret(ctx, f.store, f.acc.ID, f.client.ID, time.Hour, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if next == f.secret || !strings.HasPrefix(next, "cs_") {
		t.Fatalf("rotated secret %q", next)
	}
	f.wantValid(t, "new secret", next)
	f.wantValid(t, "old secret within the overlap", f.secret)
	f.clock.t = f.clock.t.Add(time.Hour)
	f.wantInvalid(t, "old secret once the overlap has ended", f.client.ID, f.secret)
	f.wantValid(t, "new secret after the overlap", next)

	// Without overlap the replaced secret stops at once; the one before is
	// forgotten.
	third, err := account.RotateClientSecret(ctx, f.store, f.acc.ID, f.client.ID, 0, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.wantInvalid(t, "replaced secret without overlap", f.client.ID, next)
	f.wantInvalid(t, "the secret before", f.client.ID, f.secret)
	f.wantValid(t, "third secret", third)

	other, err := f.store.CreateAccount(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := account.RotateClientSecret(ctx, f.store, other.ID, f.client.ID, time.Hour, f.clock.Now()); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("rotation through another account: %v, want ErrNotFound", err)
	}
	if _, err := account.RotateClientSecret(ctx, f.store, f.acc.ID, f.client.ID, -time.Second, f.clock.Now()); err == nil {
		t.Fatal("negative overlap accepted")
	}
	f.wantValid(t, "third secret after refused rotations", third)
}

func TestClientAuthenticationIsThrottledPerClient(t *testing.T) {
	f := newClientFixture(t)
	ctx := context.Background()
	second, secondSecret, err := account.NewServiceClient(f.acc, "second", []string{account.ScopeDefinitionsRead})
	if err != nil {
		t.Fatal(err)
	}
	if second, err = f.store.CreateClient(ctx, second); err != nil {
		t.Fatal(err)
	}

	// A success resets the count: failures before it do not add up with
	// the ones after.
	for range clientTestLimit.MaxFailures - 1 {
		f.wantInvalid(t, "wrong secret", f.client.ID, "cs_wrong")
	}
	f.wantValid(t, "right secret below the limit", f.secret)
	for range clientTestLimit.MaxFailures - 1 {
		f.wantInvalid(t, "wrong secret after the reset", f.client.ID, "cs_wrong")
	}
	f.wantValid(t, "right secret, count reset before", f.secret)

	for range clientTestLimit.MaxFailures {
		f.wantInvalid(t, "wrong secret", f.client.ID, "cs_wrong")
	}
	_, err = f.auth.Authenticate(ctx, f.client.ID, f.secret)
	var throttled *account.ClientThrottledError
	if !errors.As(err, &throttled) || throttled.RetryAfter != clientTestLimit.Lockout {
		t.Fatalf("right secret while locked: err = %v, want a ClientThrottledError after %v", err, clientTestLimit.Lockout)
	}
	if c, err := f.auth.Authenticate(ctx, second.ID, secondSecret); err != nil || c.ID != second.ID {
		t.Fatalf("another client while the first is locked: %+v, %v", c, err)
	}
	// Unknown client ids are counted and locked like known ones, so that
	// the answer tells nothing about which exist.
	for range clientTestLimit.MaxFailures {
		f.wantInvalid(t, "unknown client", "cli_unknown", "cs_wrong")
	}
	if _, err := f.auth.Authenticate(ctx, "cli_unknown", "cs_wrong"); !errors.As(err, &throttled) {
		t.Fatalf("unknown client past the limit: err = %v, want a ClientThrottledError", err)
	}

	f.clock.t = f.clock.t.Add(clientTestLimit.Lockout)
	f.wantValid(t, "right secret once the lock has ended", f.secret)
}

func TestClientAuthenticatorWithoutThrottle(t *testing.T) {
	f := newClientFixture(t)
	f.auth.Throttle = nil
	for range 2 * clientTestLimit.MaxFailures {
		f.wantInvalid(t, "wrong secret", f.client.ID, "cs_wrong")
	}
	f.wantValid(t, "right secret, nothing throttled", f.secret)
}

// BenchmarkClientSecretCheck is the secret's share of the client-
// credentials floor: hashing a presented secret and comparing it with the
// stored hash.
func BenchmarkClientSecretCheck(b *testing.B) {
	secret := account.NewClientSecret()
	c := account.ServiceClient{Scopes: []string{account.ScopeDefinitionsRead}, SecretHash: account.HashClientSecret(secret)}
	for b.Loop() {
		if account.HashClientSecret(secret) != c.SecretHash {
			b.Fatal("mismatch")
		}
	}
}

// TestClientCacheAnswersWithinItsTTL: a client that authenticated is
// answered from the cache for its TTL, whatever the store says meanwhile
// (the documented delay of a disable), and from the store after it; a
// different secret is never answered from the cache, and a failure forgets
// the client at once.
func TestClientCacheAnswersWithinItsTTL(t *testing.T) {
	f := newClientFixture(t)
	ctx := context.Background()
	const ttl = 5 * time.Second
	f.auth.Cache = account.NewClientCache(ttl, 0)
	f.wantValid(t, "first authentication", f.secret)
	if err := f.store.SetClientDisabled(ctx, f.acc.ID, f.client.ID, true); err != nil {
		t.Fatal(err)
	}
	f.clock.t = f.clock.t.Add(ttl - time.Millisecond)
	f.wantValid(t, "disabled in the store, within the TTL", f.secret)
	f.wantInvalid(t, "another secret, within the TTL", f.client.ID, account.NewClientSecret())
	f.wantInvalid(t, "the right secret after a failure forgot the client", f.client.ID, f.secret)

	if err := f.store.SetClientDisabled(ctx, f.acc.ID, f.client.ID, false); err != nil {
		t.Fatal(err)
	}
	f.wantValid(t, "re-enabled", f.secret)
	if err := f.store.SetClientDisabled(ctx, f.acc.ID, f.client.ID, true); err != nil {
		t.Fatal(err)
	}
	f.clock.t = f.clock.t.Add(ttl)
	f.wantInvalid(t, "disabled in the store, once the TTL has passed", f.client.ID, f.secret)
}

// TestClientCacheKeepsNoPreviousSecretPastItsOverlap: an entry of a
// rotated-out secret ends with the secret's overlap, even when the TTL is
// longer.
func TestClientCacheKeepsNoPreviousSecretPastItsOverlap(t *testing.T) {
	f := newClientFixture(t)
	ctx := context.Background()
	f.auth.Cache = account.NewClientCache(time.Hour, 0)
	next, err := account.RotateClientSecret(ctx, f.store, f.acc.ID, f.client.ID, time.Minute, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.wantValid(t, "previous secret within the overlap", f.secret)
	f.wantValid(t, "new secret", next)
	f.clock.t = f.clock.t.Add(time.Minute)
	f.wantInvalid(t, "previous secret once the overlap has ended", f.client.ID, f.secret)
	f.wantValid(t, "new secret, still cached", next)
}

// TestClientCacheIsBounded: past its size the cache keeps answering, each
// client still authenticated by its own secret only.
func TestClientCacheIsBounded(t *testing.T) {
	f := newClientFixture(t)
	ctx := context.Background()
	f.auth.Cache = account.NewClientCache(time.Hour, 2)
	secrets := map[string]string{f.client.ID: f.secret}
	for i := range 4 {
		c, secret, err := account.NewServiceClient(f.acc, fmt.Sprintf("extra-%d", i), []string{account.ScopeDefinitionsRead})
		if err != nil {
			t.Fatal(err)
		}
		if c, err = f.store.CreateClient(ctx, c); err != nil {
			t.Fatal(err)
		}
		secrets[c.ID] = secret
	}
	for round := range 2 {
		for id, secret := range secrets {
			if c, err := f.auth.Authenticate(ctx, id, secret); err != nil || c.ID != id {
				t.Fatalf("round %d, client %s: %+v, %v", round, id, c, err)
			}
			for other, otherSecret := range secrets {
				if other != id {
					f.wantInvalid(t, "another client's secret", id, otherSecret)
					break
				}
			}
		}
	}
}
