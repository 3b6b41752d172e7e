package signing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
	"github.com/acme/platform/services/account"
	"github.com/acme/platform/services/account/mongostore"
	"github.com/acme/platform/services/account/signing"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

const (
	alg          = token.AlgES256 // cheap to generate; the scheme is the same for all
	period       = 24 * time.Hour
	publishAhead = 10 * time.Minute
	retain       = 2 * time.Hour
)

// clock is a settable clock shared by the managers of a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock {
	return &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func newStore(t *testing.T) *mongostore.Store {
	t.Helper()
	s := mongostore.New(mongotest.New(t))
	if err := s.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func newManager(t *testing.T, store account.SigningKeyStore, clk *clock, edit ...func(*signing.Options)) *signing.Manager {
	t.Helper()
	opts := signing.Options{
		Store:         store,
		Alg:           alg,
		Period:        period,
		PublishAhead:  publishAhead,
		CheckInterval: time.Minute,
		Retain:        retain,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:           clk.Now,
	}
	for _, e := range edit {
		e(&opts)
	}
	m, err := signing.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustSync(t *testing.T, m *signing.Manager) {
	t.Helper()
	if err := m.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func stored(t *testing.T, s account.SigningKeyStore) account.SigningKeys {
	t.Helper()
	ks, err := s.SigningKeys(context.Background(), alg)
	if err != nil {
		t.Fatalf("SigningKeys: %v", err)
	}
	return ks
}

// published returns the kids of the keyring's JWKS, active first.
func published(t *testing.T, m *signing.Manager) []string {
	t.Helper()
	ring := m.Keyring()
	if ring == nil {
		t.Fatal("no keyring")
	}
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
			D   string `json:"d"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(ring.JWKS(), &set); err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, k := range set.Keys {
		if k.D != "" {
			t.Fatalf("JWKS publishes private key %s", k.Kid)
		}
		kids = append(kids, k.Kid)
	}
	return kids
}

func kids(keys []account.SigningKey) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.KID)
	}
	return out
}

func TestFirstSyncCreatesOneKey(t *testing.T) {
	store, clk := newStore(t), newClock()
	m := newManager(t, store, clk)
	if m.Keyring() != nil {
		t.Fatal("keyring before the first Sync")
	}
	mustSync(t, m)
	ks := stored(t, store)
	if ks.Version != 1 || len(ks.Keys) != 1 {
		t.Fatalf("stored %d keys, version %d; want 1 key, version 1", len(ks.Keys), ks.Version)
	}
	first := ks.Keys[0]
	if !first.CreatedAt.Equal(clk.Now()) || !first.SignsFrom.Equal(first.CreatedAt) || !first.ExpiresAt.IsZero() || first.Alg != alg {
		t.Fatalf("first key = created %v, signs from %v, expires %v, alg %s; want signing at once, no expiry",
			first.CreatedAt, first.SignsFrom, first.ExpiresAt, first.Alg)
	}
	if m.Keyring().KeyID() != first.KID || !slices.Equal(published(t, m), []string{first.KID}) {
		t.Fatalf("keyring signs with %s and publishes %v; want %s", m.Keyring().KeyID(), published(t, m), first.KID)
	}

	// A restart (a new manager) loads the same key and stores nothing.
	again := newManager(t, store, clk)
	mustSync(t, again)
	if again.Keyring().KeyID() != first.KID || stored(t, store).Version != 1 {
		t.Fatalf("restart signs with %s (version %d), want %s unchanged", again.Keyring().KeyID(), stored(t, store).Version, first.KID)
	}
}

// syncTogether runs Sync on all managers at once and fails on any error.
func syncTogether(t *testing.T, managers []*signing.Manager) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, len(managers))
	for i, m := range managers {
		wg.Go(func() {
			<-start
			errs[i] = m.Sync(context.Background())
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("manager %d: Sync: %v", i, err)
		}
	}
}

// sameKeyrings fails unless every manager signs with the same key and
// publishes the same JWKS, and returns the published kids.
func sameKeyrings(t *testing.T, managers []*signing.Manager) []string {
	t.Helper()
	want := managers[0].Keyring()
	for i, m := range managers[1:] {
		got := m.Keyring()
		if got.KeyID() != want.KeyID() || !bytes.Equal(got.JWKS(), want.JWKS()) {
			t.Fatalf("manager %d signs with %s and publishes %v; manager 0 signs with %s and publishes %v",
				i+1, got.KeyID(), published(t, m), want.KeyID(), published(t, managers[0]))
		}
	}
	return published(t, managers[0])
}

func TestManagersStartingTogetherAgree(t *testing.T) {
	store, clk := newStore(t), newClock()
	managers := []*signing.Manager{newManager(t, store, clk), newManager(t, store, clk)}
	syncTogether(t, managers)
	kids := sameKeyrings(t, managers)
	if ks := stored(t, store); len(ks.Keys) != 1 || ks.Version != 1 || ks.Keys[0].KID != kids[0] {
		t.Fatalf("stored %v version %d; want the one key both use", ks.Keys, ks.Version)
	}
}

// TestRotationTimeline walks one key's life with an injected clock, with two
// replicas that must agree at every step.
func TestRotationTimeline(t *testing.T) {
	store, clk := newStore(t), newClock()
	a, b := newManager(t, store, clk), newManager(t, store, clk)
	replicas := []*signing.Manager{a, b}
	t0 := clk.Now()
	mustSync(t, a)
	mustSync(t, b)
	k0 := a.Keyring().KeyID()

	step := func(at time.Time) []string {
		t.Helper()
		clk.Set(at)
		mustSync(t, a)
		mustSync(t, b)
		return sameKeyrings(t, replicas)
	}

	// Not yet due: one key.
	due := t0.Add(period - publishAhead)
	if got := step(due.Add(-time.Millisecond)); !slices.Equal(got, []string{k0}) {
		t.Fatalf("before the rotation is due: published %v, want [%s]", got, k0)
	}
	// Due: a successor is published at once, but does not sign yet.
	got := step(due)
	ks := stored(t, store)
	if len(ks.Keys) != 2 || ks.Keys[0].KID != k0 {
		t.Fatalf("at %v: stored %v, want k0 and a successor", due, kids(ks.Keys))
	}
	k1 := ks.Keys[1]
	if !k1.CreatedAt.Equal(due) || !k1.SignsFrom.Equal(t0.Add(period)) || !k1.ExpiresAt.IsZero() {
		t.Fatalf("successor created %v, signs from %v, expires %v; want created %v, signing from %v (one period after k0)",
			k1.CreatedAt, k1.SignsFrom, k1.ExpiresAt, due, t0.Add(period))
	}
	if want := k1.SignsFrom.Add(retain); !ks.Keys[0].ExpiresAt.Equal(want) {
		t.Fatalf("k0 expires at %v, want the successor's signs_from + retention = %v", ks.Keys[0].ExpiresAt, want)
	}
	if !slices.Equal(got, []string{k0, k1.KID}) {
		t.Fatalf("after the successor was added: published %v (active first), want [%s %s]", got, k0, k1.KID)
	}
	version := ks.Version

	// Publish-ahead: still k0 signing until signs_from.
	if got := step(k1.SignsFrom.Add(-time.Millisecond)); !slices.Equal(got, []string{k0, k1.KID}) {
		t.Fatalf("just before signs_from: published %v, want k0 active", got)
	}
	if got := step(k1.SignsFrom); !slices.Equal(got, []string{k1.KID, k0}) {
		t.Fatalf("at signs_from: published %v, want [%s %s] (k1 active, k0 still published)", got, k1.KID, k0)
	}
	if v := stored(t, store).Version; v != version {
		t.Fatalf("taking over changed the document (version %d → %d); it is derived from the clock", version, v)
	}

	// k0 stays published until the last token it signed expired.
	expires := k1.SignsFrom.Add(retain)
	if got := step(expires.Add(-time.Millisecond)); !slices.Equal(got, []string{k1.KID, k0}) {
		t.Fatalf("just before k0 expires: published %v", got)
	}
	if got := step(expires); !slices.Equal(got, []string{k1.KID}) {
		t.Fatalf("when k0 expired: published %v, want [%s]", got, k1.KID)
	}
	if ks := stored(t, store); !slices.Equal(kids(ks.Keys), []string{k1.KID}) || ks.Version != version+1 {
		t.Fatalf("after k0 expired: stored %v version %d, want only k1 at version %d", kids(ks.Keys), ks.Version, version+1)
	}

	// The cadence holds: k2 takes over exactly one period after k1.
	step(k1.SignsFrom.Add(period - publishAhead))
	ks = stored(t, store)
	if len(ks.Keys) != 2 || !ks.Keys[1].SignsFrom.Equal(k1.SignsFrom.Add(period)) {
		t.Fatalf("third key: stored %v, want k1 and a successor signing from %v", kids(ks.Keys), k1.SignsFrom.Add(period))
	}
}

func TestConcurrentRotationAddsOneSuccessor(t *testing.T) {
	store, clk := newStore(t), newClock()
	var managers []*signing.Manager
	for range 5 {
		// Retained longer than the test's three periods: keys only add up.
		managers = append(managers, newManager(t, store, clk, func(o *signing.Options) { o.Retain = 10 * period }))
	}
	syncTogether(t, managers)
	first := sameKeyrings(t, managers)

	for round := 1; round <= 3; round++ {
		// Everyone wakes at the moment the rotation is due.
		ks := stored(t, store)
		clk.Set(ks.Keys[len(ks.Keys)-1].SignsFrom.Add(period - publishAhead))
		syncTogether(t, managers)
		got := sameKeyrings(t, managers)
		after := stored(t, store)
		if len(after.Keys) != len(ks.Keys)+1 || after.Version != ks.Version+1 {
			t.Fatalf("round %d: %d keys at version %d became %d keys at version %d; want exactly one successor in one update",
				round, len(ks.Keys), ks.Version, len(after.Keys), after.Version)
		}
		if !slices.Contains(got, after.Keys[len(after.Keys)-1].KID) {
			t.Fatalf("round %d: the successor is not published: %v", round, got)
		}
		// Then it takes over, everywhere.
		clk.Set(after.Keys[len(after.Keys)-1].SignsFrom)
		syncTogether(t, managers)
		sameKeyrings(t, managers)
		if managers[0].Keyring().KeyID() != after.Keys[len(after.Keys)-1].KID {
			t.Fatalf("round %d: the successor does not sign at its signs_from", round)
		}
	}
	if got := published(t, managers[0]); len(got) != 4 || !slices.Contains(got, first[0]) {
		t.Fatalf("after 3 rotations within the retention: published %v, want 4 keys including the first", got)
	}
}

// interferingStore runs before once, right before the first update, as if
// another replica had written in between.
type interferingStore struct {
	account.SigningKeyStore
	before  func()
	once    sync.Once
	updates atomic.Int32
}

func (s *interferingStore) UpdateSigningKeys(ctx context.Context, alg string, version int64, keys []account.SigningKey) (account.SigningKeys, error) {
	s.once.Do(s.before)
	s.updates.Add(1)
	return s.SigningKeyStore.UpdateSigningKeys(ctx, alg, version, keys)
}

func TestVersionConflictIsRetried(t *testing.T) {
	t.Run("the other change was unrelated", func(t *testing.T) {
		store, clk := newStore(t), newClock()
		mustSync(t, newManager(t, store, clk))
		istore := &interferingStore{SigningKeyStore: store, before: func() {
			// Another writer bumps the version without adding a key.
			ks := stored(t, store)
			if _, err := store.UpdateSigningKeys(context.Background(), alg, ks.Version, ks.Keys); err != nil {
				t.Errorf("interfering update: %v", err)
			}
		}}
		m := newManager(t, istore, clk)
		clk.Set(clk.Now().Add(period - publishAhead))
		mustSync(t, m)
		ks := stored(t, store)
		if istore.updates.Load() != 2 || ks.Version != 3 || len(ks.Keys) != 2 {
			t.Fatalf("%d update attempts, stored %d keys at version %d; want a conflict, a retry, and one successor at version 3",
				istore.updates.Load(), len(ks.Keys), ks.Version)
		}
		if !slices.Equal(published(t, m), kids(ks.Keys)) {
			t.Fatalf("published %v, stored %v", published(t, m), kids(ks.Keys))
		}
	})
	t.Run("the other replica rotated first", func(t *testing.T) {
		store, clk := newStore(t), newClock()
		other := newManager(t, store, clk)
		mustSync(t, other)
		istore := &interferingStore{SigningKeyStore: store, before: func() {
			if err := other.Sync(context.Background()); err != nil {
				t.Errorf("other replica: %v", err)
			}
		}}
		m := newManager(t, istore, clk)
		mustSync(t, m)
		clk.Set(clk.Now().Add(period - publishAhead))
		mustSync(t, m)
		ks := stored(t, store)
		if istore.updates.Load() != 1 || ks.Version != 2 || len(ks.Keys) != 2 {
			t.Fatalf("%d update attempts, stored %d keys at version %d; want the loser to adopt the winner's successor",
				istore.updates.Load(), len(ks.Keys), ks.Version)
		}
		sameKeyrings(t, []*signing.Manager{m, other})
	})
}

// lostReplyStore applies the first write (CreateSigningKeys or
// UpdateSigningKeys) and answers it with an error, like a database whose
// reply is lost or late.
type lostReplyStore struct {
	account.SigningKeyStore
	lost atomic.Bool
}

func (s *lostReplyStore) CreateSigningKeys(ctx context.Context, alg string, keys []account.SigningKey) (account.SigningKeys, error) {
	ks, err := s.SigningKeyStore.CreateSigningKeys(ctx, alg, keys)
	if err == nil && s.lost.CompareAndSwap(false, true) {
		return account.SigningKeys{}, errDown
	}
	return ks, err
}

func (s *lostReplyStore) UpdateSigningKeys(ctx context.Context, alg string, version int64, keys []account.SigningKey) (account.SigningKeys, error) {
	ks, err := s.SigningKeyStore.UpdateSigningKeys(ctx, alg, version, keys)
	if err == nil && s.lost.CompareAndSwap(false, true) {
		return account.SigningKeys{}, errDown
	}
	return ks, err
}

// TestKeyStoredDespiteAnErrorIsLoggedOnce: a key whose write answered
// with an error but was applied (the first key, or a successor) has its
// creation logged once, at the next sync, so that every key that signs
// has its creation in the log.
func TestKeyStoredDespiteAnErrorIsLoggedOnce(t *testing.T) {
	for _, lostWrite := range []string{"first key", "successor"} {
		t.Run(lostWrite, func(t *testing.T) {
			store, clk := newStore(t), newClock()
			var logs bytes.Buffer
			lossy := &lostReplyStore{SigningKeyStore: store}
			m := newManager(t, lossy, clk, func(o *signing.Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
			if lostWrite == "successor" {
				lossy.lost.Store(true) // the first key's write answers
				mustSync(t, m)
				lossy.lost.Store(false)
				clk.Set(clk.Now().Add(period - publishAhead))
			}
			if err := m.Sync(context.Background()); err == nil {
				t.Fatal("the sync whose write answered with an error succeeded")
			}
			mustSync(t, m)
			want := map[string]int{"first key": 1, "successor": 2}[lostWrite]
			if n := checkCreationsLoggedOnce(t, store, &logs); n != want {
				t.Fatalf("stored %d keys, want %d", n, want)
			}
		})
	}
}

// checkCreationsLoggedOnce checks that logs hold the creation of every
// key stored, once, and returns how many keys are stored.
func checkCreationsLoggedOnce(t *testing.T, store account.SigningKeyStore, logs *bytes.Buffer) int {
	t.Helper()
	ks := stored(t, store)
	logged := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var l struct{ Msg, Kid string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l.Msg == "first signing key created" || l.Msg == "next signing key added" {
			logged[l.Kid]++
		}
	}
	for _, k := range ks.Keys {
		if logged[k.KID] != 1 {
			t.Errorf("creation of %s logged %d times:\n%s", k.KID, logged[k.KID], logs.String())
		}
	}
	return len(ks.Keys)
}

// flakyStore fails every call while down is set, like an unreachable
// MongoDB.
type flakyStore struct {
	account.SigningKeyStore
	down atomic.Bool
}

var errDown = errors.New("mongodb unreachable")

func (s *flakyStore) SigningKeys(ctx context.Context, alg string) (account.SigningKeys, error) {
	if s.down.Load() {
		return account.SigningKeys{}, errDown
	}
	return s.SigningKeyStore.SigningKeys(ctx, alg)
}

func TestStoreDownKeepsKeyringAndFollowsTheClock(t *testing.T) {
	store, clk := newStore(t), newClock()
	flaky := &flakyStore{SigningKeyStore: store}
	m := newManager(t, flaky, clk)
	mustSync(t, m)
	k0 := m.Keyring().KeyID()
	clk.Set(clk.Now().Add(period - publishAhead))
	mustSync(t, m)
	k1 := stored(t, store).Keys[1]

	flaky.down.Store(true)
	if err := m.Sync(context.Background()); !errors.Is(err, errDown) {
		t.Fatalf("Sync with the store down: err = %v, want errDown", err)
	}
	if got := published(t, m); !slices.Equal(got, []string{k0, k1.KID}) {
		t.Fatalf("store down: published %v, want the last keyring", got)
	}
	// The successor it already knows still takes over on time, and the
	// expired key still goes.
	clk.Set(k1.SignsFrom)
	_ = m.Sync(context.Background())
	if got := published(t, m); !slices.Equal(got, []string{k1.KID, k0}) {
		t.Fatalf("store down at signs_from: published %v, want k1 active", got)
	}
	clk.Set(k1.SignsFrom.Add(retain))
	_ = m.Sync(context.Background())
	if got := published(t, m); !slices.Equal(got, []string{k1.KID}) {
		t.Fatalf("store down after k0 expired: published %v, want [k1]", got)
	}

	// A replica that never loaded anything has no keyring (not ready).
	fresh := newManager(t, flaky, clk)
	if err := fresh.Sync(context.Background()); err == nil || fresh.Keyring() != nil {
		t.Fatalf("first Sync with the store down: err %v, keyring %v", err, fresh.Keyring())
	}
	flaky.down.Store(false)
	mustSync(t, fresh)
	sameKeyrings(t, []*signing.Manager{m, fresh})
}

func TestRotationDisabled(t *testing.T) {
	store, clk := newStore(t), newClock()
	m := newManager(t, store, clk, func(o *signing.Options) { o.Period, o.PublishAhead = 0, 0 })
	mustSync(t, m)
	k0 := m.Keyring().KeyID()
	clk.Set(clk.Now().Add(10 * period))
	mustSync(t, m)
	if ks := stored(t, store); len(ks.Keys) != 1 || m.Keyring().KeyID() != k0 {
		t.Fatalf("rotation disabled: stored %v, signing with %s; want k0 only", kids(ks.Keys), m.Keyring().KeyID())
	}
}

func TestCorruptStoredKeyIsReported(t *testing.T) {
	store, clk := newStore(t), newClock()
	if _, err := store.CreateSigningKeys(context.Background(), alg, []account.SigningKey{{
		KID: "bogus", Alg: alg, JWK: []byte(`{"kty":"EC"}`), CreatedAt: clk.Now(), SignsFrom: clk.Now(),
	}}); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, store, clk)
	if err := m.Sync(context.Background()); !errors.Is(err, signing.ErrStoredKey) || m.Keyring() != nil {
		t.Fatalf("corrupt key: err = %v, keyring %v; want ErrStoredKey and none", err, m.Keyring())
	}
}

func TestStateAt(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	keys := []account.SigningKey{
		{KID: "a", SignsFrom: at(0), ExpiresAt: at(15)},
		{KID: "b", SignsFrom: at(10), ExpiresAt: at(25)},
		{KID: "c", SignsFrom: at(20)},
	}
	for _, tc := range []struct {
		now    int
		active string
		pub    []int
	}{
		{-1, "a", []int{0, 1, 2}}, // a clock behind everyone: the earliest key
		{0, "a", []int{0, 1, 2}},
		{10, "b", []int{0, 1, 2}},
		{15, "b", []int{1, 2}},
		{20, "c", []int{1, 2}},
		{25, "c", []int{2}},
	} {
		s := signing.StateAt(keys, at(tc.now))
		if keys[s.Active].KID != tc.active || !slices.Equal(s.Published, tc.pub) {
			t.Errorf("at %dh: active %s, published %v; want %s, %v", tc.now, keys[s.Active].KID, s.Published, tc.active, tc.pub)
		}
	}
}

func TestNewRefusesBadTimings(t *testing.T) {
	store := &flakyStore{}
	for name, opts := range map[string]signing.Options{
		"no store":               {Alg: alg, Retain: time.Hour},
		"no retention":           {Store: store, Alg: alg},
		"ahead not below period": {Store: store, Alg: alg, Retain: time.Hour, Period: time.Hour, PublishAhead: time.Hour},
		"no publish-ahead":       {Store: store, Alg: alg, Retain: time.Hour, Period: time.Hour},
		"check not below ahead":  {Store: store, Alg: alg, Retain: time.Hour, Period: time.Hour, PublishAhead: time.Minute, CheckInterval: time.Minute},
		"negative":               {Store: store, Alg: alg, Retain: time.Hour, Period: -time.Hour},
		"symmetric algorithm":    {Store: store, Alg: "HS256", Retain: time.Hour},
	} {
		if _, err := signing.New(opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, opts)
		}
	}
}

// TestRunRotatesOnTime runs two managers on the real clock with a short
// period: the successor takes over on both, and Run returns when its
// context ends.
func TestRunRotatesOnTime(t *testing.T) {
	store := newStore(t)
	edit := func(o *signing.Options) {
		o.Now = time.Now
		o.Period, o.PublishAhead, o.CheckInterval, o.Retain = 2*time.Second, time.Second, 200*time.Millisecond, time.Hour
	}
	a, b := newManager(t, store, nil, edit), newManager(t, store, nil, edit)
	mustSync(t, a)
	mustSync(t, b)
	k0 := a.Keyring().KeyID()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, m := range []*signing.Manager{a, b} {
		wg.Go(func() { m.Run(ctx) })
	}
	// The managers rotate when their goroutines get to run, which a loaded
	// machine may delay: only the test's own deadline bounds the wait.
	began := time.Now()
	end, bounded := t.Deadline()
	for a.Keyring().KeyID() == k0 || b.Keyring().KeyID() != a.Keyring().KeyID() {
		if bounded && time.Until(end) < 10*time.Second {
			t.Fatalf("no common rotation within %v: a signs with %s, b with %s (k0 %s)", time.Since(began).Round(time.Millisecond), a.Keyring().KeyID(), b.Keyring().KeyID(), k0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := published(t, a); !slices.Contains(got, k0) {
		t.Fatalf("after the rotation: published %v, want k0 still there", got)
	}
	cancel()
	wg.Wait()
	if ks := stored(t, store); len(ks.Keys) < 2 {
		t.Fatalf("stored %v", kids(ks.Keys))
	}
}

// countingStore counts the loads of the keyring document.
type countingStore struct {
	account.SigningKeyStore
	loads atomic.Int64
}

func (s *countingStore) SigningKeys(ctx context.Context, alg string) (account.SigningKeys, error) {
	s.loads.Add(1)
	return s.SigningKeyStore.SigningKeys(ctx, alg)
}

// A replica whose scheduled reload lags (a loaded machine) still verifies
// a token signed by a key another replica added: the unknown kid makes it
// reload at once. Unknown kids that stay unknown (forged tokens) reload at
// most once a second.
func TestUnknownKidReloadsTheKeyringOnce(t *testing.T) {
	store, clk := newStore(t), newClock()
	counting := &countingStore{SigningKeyStore: store}
	lagging, rotating := newManager(t, counting, clk), newManager(t, store, clk)
	mustSync(t, lagging)
	mustSync(t, rotating)
	t0 := clk.Now()

	// The successor is added and takes over on the rotating replica; the
	// lagging one has not synced since.
	clk.Set(t0.Add(period - publishAhead))
	mustSync(t, rotating)
	clk.Set(t0.Add(period))
	mustSync(t, rotating)
	if rotating.Keyring().KeyID() == lagging.Keyring().KeyID() {
		t.Fatal("the rotating replica did not take the successor")
	}
	const issuer = "https://account.example"
	aud := []string{"acme-platform"}
	minter, err := token.NewIssuer(token.IssuerConfig{Issuer: issuer, Audience: aud, Keys: rotating, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	set, err := minter.Mint(context.Background(), token.Subject{UserID: "u1", AccountID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := token.NewVerifier(token.KeyringKeySet(lagging), token.VerifierConfig{Issuer: issuer, Audience: aud, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	// Requests carrying the new key's tokens arrive together: every one
	// is verified, by one reload.
	before := counting.loads.Load()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = verifier.Verify(context.Background(), set.AccessToken) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d with a token of the key another replica added: %v", i, err)
		}
	}
	if got := counting.loads.Load() - before; got != 1 {
		t.Fatalf("the unknown kid caused %d loads of the keyring, want 1", got)
	}

	// A forged kid: still refused, and within the second no more loads.
	forged := tokentest.StrangerOf(t, alg, issuer, aud, token.Subject{UserID: "u1", AccountID: "a1"}, lagging.Keyring())
	before = counting.loads.Load()
	for range 3 {
		if _, err := verifier.Verify(context.Background(), forged.AccessToken); !errors.Is(err, token.ErrInvalidToken) {
			t.Fatalf("forged token: %v, want invalid", err)
		}
	}
	if got := counting.loads.Load() - before; got != 0 {
		t.Fatalf("forged kids within a second of the last reload caused %d loads, want 0", got)
	}
	clk.Set(clk.Now().Add(time.Second))
	if _, err := verifier.Verify(context.Background(), forged.AccessToken); !errors.Is(err, token.ErrInvalidToken) {
		t.Fatalf("forged token: %v, want invalid", err)
	}
	if got := counting.loads.Load() - before; got != 1 {
		t.Fatalf("a forged kid a second later caused %d loads, want 1", got)
	}
}
