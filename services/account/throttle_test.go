package account_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/account"
)

func TestLockoutForDoublesUpToTheMaximum(t *testing.T) {
	l := account.ThrottleLimit{MaxFailures: 5, Window: time.Minute, Lockout: 15 * time.Minute, MaxLockout: 4 * time.Hour}
	var got []time.Duration
	for n := 1; n <= 7; n++ {
		got = append(got, l.LockoutFor(n))
	}
	want := []time.Duration{15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 4 * time.Hour, 4 * time.Hour, 4 * time.Hour}
	if !slices.Equal(got, want) {
		t.Errorf("LockoutFor(1..7) = %v, want %v", got, want)
	}
	if d := l.LockoutFor(1 << 30); d != 4*time.Hour {
		t.Errorf("LockoutFor(huge) = %v", d)
	}
	fixed := account.ThrottleLimit{MaxFailures: 5, Window: time.Minute, Lockout: 15 * time.Minute}
	if d := fixed.LockoutFor(3); d != 15*time.Minute {
		t.Errorf("without MaxLockout: LockoutFor(3) = %v, want the fixed 15m", d)
	}
}

func TestNextLockRemembersRecentLockouts(t *testing.T) {
	l := account.DefaultThrottlePolicy.User
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		prev  account.ThrottleState
		until time.Duration
		n     int
	}{
		{"never locked", account.ThrottleState{}, 15 * time.Minute, 1},
		{"locked an hour ago", account.ThrottleState{LockedUntil: now.Add(-time.Hour), Lockouts: 2}, time.Hour, 3},
		{"locked more than a day ago", account.ThrottleState{LockedUntil: now.Add(-account.StrikeMemory), Lockouts: 4}, 15 * time.Minute, 1},
	} {
		until, n := l.NextLock(tc.prev, now)
		if !until.Equal(now.Add(tc.until)) || n != tc.n {
			t.Errorf("%s: NextLock = now+%v, %d; want now+%v, %d", tc.name, until.Sub(now), n, tc.until, tc.n)
		}
	}
}

func TestThrottlePolicyValidate(t *testing.T) {
	if err := account.DefaultThrottlePolicy.Validate(); err != nil {
		t.Errorf("default policy: %v", err)
	}
	if err := (account.ThrottlePolicy{}).Validate(); err != nil {
		t.Errorf("disabled policy: %v", err)
	}
	bad := account.DefaultThrottlePolicy
	bad.IP.Window = 0
	if err := bad.Validate(); err == nil {
		t.Error("zero window accepted")
	}
}

func TestThrottleKeys(t *testing.T) {
	same := func(a, b string) {
		t.Helper()
		if a != b {
			t.Errorf("%q != %q", a, b)
		}
	}
	differ := func(a, b string) {
		t.Helper()
		if a == b {
			t.Errorf("keys collide: %q", a)
		}
	}
	same(account.UserThrottleKey("Acme ", " ALICE"), account.UserThrottleKey("acme", "alice"))
	differ(account.UserThrottleKey("acme", "alice"), account.UserThrottleKey("globex", "alice"))
	differ(account.UserThrottleKey("a", "b:c"), account.UserThrottleKey("a:b", "c"))
	if k := account.UserThrottleKey("acme", "hunter2"); len(k) != len("user:")+64 || strings.Contains(k, "hunter2") {
		t.Errorf("user key %q is not a hash", k)
	}

	same(account.IPThrottleKey("192.0.2.1"), "ip:192.0.2.1")
	same(account.IPThrottleKey("::ffff:192.0.2.1"), "ip:192.0.2.1")
	differ(account.IPThrottleKey("192.0.2.1"), account.IPThrottleKey("192.0.2.2"))
	// IPv6: one /64 is one client.
	same(account.IPThrottleKey("2001:db8:1:2::1"), "ip:2001:db8:1:2::/64")
	same(account.IPThrottleKey("2001:db8:1:2:ffff:ffff:ffff:ffff"), "ip:2001:db8:1:2::/64")
	differ(account.IPThrottleKey("2001:db8:1:2::1"), account.IPThrottleKey("2001:db8:1:3::1"))
	same(account.IPThrottleKey("fe80::1%eth0"), account.IPThrottleKey("fe80::2"))
	same(account.IPThrottleKey("not an address"), "ip:not an address")
}

// fakeThrottleStore records calls; locked and fail name keys that are
// locked (until when) or whose updates fail; busy names keys whose window
// is full of attempts in flight for that many more looks (takes or reads).
type fakeThrottleStore struct {
	account.LoginThrottleStore
	calls  []string
	locked map[string]time.Time
	fail   map[string]bool
	busy   map[string]int
	// renewed receives the renewals of leases, when set (they come from
	// another goroutine, so they are not among calls).
	renewed chan string
}

// saturated is the state of a key full of attempts in flight at now.
func saturated(now time.Time) account.ThrottleState {
	return account.ThrottleState{Window: "w1", Pending: 5, PendingUntil: now.Add(account.AttemptLease), WindowEnd: now.Add(time.Minute)}
}

func (f *fakeThrottleStore) state(key string) (account.ThrottleState, bool) {
	if until, ok := f.locked[key]; ok {
		return account.ThrottleState{LockedUntil: until}, true
	}
	if f.busy[key] > 0 {
		f.busy[key]--
		return saturated(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), true
	}
	return account.ThrottleState{}, false
}

func (f *fakeThrottleStore) LoginThrottleState(_ context.Context, key string) (account.ThrottleState, error) {
	f.calls = append(f.calls, "read "+key)
	if f.fail[key] {
		return account.ThrottleState{}, errors.New("database down")
	}
	st, _ := f.state(key)
	return st, nil
}

func (f *fakeThrottleStore) AddLoginAttempt(_ context.Context, key string, a account.ThrottleAttempt) (bool, account.ThrottleState, error) {
	var lease time.Duration
	if a.Pending {
		lease = a.PendingUntil.Sub(a.Now)
	}
	f.calls = append(f.calls, fmt.Sprintf("take %s %v", key, lease))
	if f.fail[key] {
		return false, account.ThrottleState{}, errors.New("database down")
	}
	if st, refused := f.state(key); refused {
		return false, st, nil
	}
	return true, account.ThrottleState{Window: "w1", Pending: 1}, nil
}

func (f *fakeThrottleStore) SettleLoginFailure(_ context.Context, key, window string) (account.ThrottleState, bool, error) {
	f.calls = append(f.calls, "fail "+key+" "+window)
	return account.ThrottleState{Window: window, Failures: 1}, true, nil
}

func (f *fakeThrottleStore) RenewLoginAttempt(_ context.Context, key, window string, until time.Time) error {
	if f.renewed != nil {
		select {
		case f.renewed <- fmt.Sprintf("renew %s %s until %s", key, window, until.Format(time.RFC3339)):
		default:
		}
	}
	return nil
}

func (f *fakeThrottleStore) RefundLoginAttempt(_ context.Context, key, window string) error {
	f.calls = append(f.calls, "refund "+key+" "+window)
	return nil
}

func (f *fakeThrottleStore) ResetLoginThrottle(_ context.Context, key string) error {
	f.calls = append(f.calls, "reset "+key)
	return nil
}

func TestLoginThrottleBeginAndSettle(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ip, user := account.IPThrottleKey("192.0.2.1"), account.UserThrottleKey("acme", "alice")
	takeIP, takeUser := "take "+ip+" 0s", "take "+user+" "+account.AttemptLease.String()
	newThrottle := func(f *fakeThrottleStore) *account.LoginThrottle {
		return &account.LoginThrottle{Store: f, Policy: account.DefaultThrottlePolicy, Now: func() time.Time { return now }}
	}
	begin := func(th *account.LoginThrottle) (*account.LoginAttempt, time.Duration, error) {
		return th.Begin(ctx, "Acme", "Alice", "192.0.2.1")
	}
	check := func(name string, f *fakeThrottleStore, want ...string) {
		t.Helper()
		if !slices.Equal(f.calls, want) {
			t.Errorf("%s: calls %q, want %q", name, f.calls, want)
		}
		f.calls = nil
	}

	// Allowed: the address is read, the user's window gives the attempt a
	// place (with a lease), which the outcome settles.
	f := &fakeThrottleStore{}
	a, wait, err := begin(newThrottle(f))
	if err != nil || wait != 0 || a == nil {
		t.Fatalf("allowed: %v, %v, %v", a, wait, err)
	}
	check("begin", f, "read "+ip, takeUser)
	if err := a.Failed(ctx); err != nil {
		t.Fatal(err)
	}
	check("failed", f, "fail "+user+" w1", takeIP)
	if err := a.Succeeded(ctx); err != nil {
		t.Fatal(err)
	}
	check("succeeded", f, "reset "+user)
	a.Abandon(ctx)
	check("abandoned", f, "refund "+user+" w1")

	// A locked address leaves the user counter alone.
	f = &fakeThrottleStore{locked: map[string]time.Time{ip: now.Add(90 * time.Second)}}
	if a, wait, err := begin(newThrottle(f)); a != nil || wait != 90*time.Second || err != nil {
		t.Errorf("address locked: %v, %v, %v; want a wait of 90s", a, wait, err)
	}
	check("address locked", f, "read "+ip)

	// A lock that has ended is no lock.
	f = &fakeThrottleStore{locked: map[string]time.Time{ip: now}}
	if a, wait, err := begin(newThrottle(f)); a == nil || wait != 0 || err != nil {
		t.Errorf("address lock ended: %v, %v, %v; want allowed", a, wait, err)
	}

	// A locked user: the wait is at least a second.
	f = &fakeThrottleStore{locked: map[string]time.Time{user: now.Add(10 * time.Millisecond)}}
	if a, wait, err := begin(newThrottle(f)); a != nil || wait != time.Second || err != nil {
		t.Errorf("user locked: %v, %v, %v; want a wait of 1s", a, wait, err)
	}

	// A user window full of attempts in flight: the login waits, reading
	// the counter only, and takes its place once there is one...
	f = &fakeThrottleStore{busy: map[string]int{user: 3}}
	if a, wait, err := begin(newThrottle(f)); a == nil || wait != 0 || err != nil {
		t.Errorf("window full for a moment: %v, %v, %v; want allowed", a, wait, err)
	}
	check("window full for a moment", f, "read "+ip, takeUser, "read "+user, "read "+user, "read "+user, takeUser)
	// ...however long the attempts in flight take on the throttle's clock
	// (here an hour between two looks): a correct login is not refused
	// because its neighbours were slow...
	f = &fakeThrottleStore{busy: map[string]int{user: 4}}
	th := newThrottle(f)
	th.Now = slowClock(now)
	if a, wait, err := begin(th); a == nil || wait != 0 || err != nil {
		t.Errorf("window full for hours: %v, %v, %v; want allowed", a, wait, err)
	}
	// ...or, with an explicit QueueWait, when it stays full for all of
	// it, is refused with the short Retry-After (not a lock).
	f = &fakeThrottleStore{busy: map[string]int{user: math.MaxInt}}
	th = newThrottle(f)
	th.Now = slowClock(now)
	th.QueueWait = 20 * time.Minute
	if a, wait, err := begin(th); a != nil || wait != account.SaturatedRetryAfter || err != nil {
		t.Errorf("window full: %v, %v, %v; want a wait of %v", a, wait, err, account.SaturatedRetryAfter)
	}
	// The same when the client goes away while waiting.
	f = &fakeThrottleStore{busy: map[string]int{user: math.MaxInt}}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if a, wait, err := newThrottle(f).Begin(gone, "acme", "alice", "192.0.2.1"); a != nil || wait != account.SaturatedRetryAfter || err != nil {
		t.Errorf("client gone while waiting: %v, %v, %v; want a wait of %v", a, wait, err, account.SaturatedRetryAfter)
	}

	// A store error refuses the login (fail closed).
	for _, key := range []string{ip, user} {
		f = &fakeThrottleStore{fail: map[string]bool{key: true}}
		if a, _, err := begin(newThrottle(f)); a != nil || err == nil {
			t.Errorf("store error on %s: %v, %v; want an error", key, a, err)
		}
	}
	f = &fakeThrottleStore{fail: map[string]bool{ip: true}}
	th = newThrottle(f)
	th.Policy.IP.MaxFailures = 0 // the address is not even read
	if a, _, err = begin(th); err != nil {
		t.Fatal(err)
	}
	if err := a.Failed(ctx); err != nil {
		t.Fatal(err)
	}
	check("address limit disabled", f, takeUser, "fail "+user+" w1")

	// No user limit: nothing to reset or refund, and a failure counts
	// for the address only.
	f = &fakeThrottleStore{}
	th = newThrottle(f)
	th.Policy.User.MaxFailures = 0
	if a, _, err = begin(th); err != nil {
		t.Fatal(err)
	}
	_ = a.Succeeded(ctx)
	a.Abandon(ctx)
	if err := a.Failed(ctx); err != nil {
		t.Fatal(err)
	}
	check("user limit disabled", f, "read "+ip, takeIP)

	// No throttle: nothing to do, and settling a nil attempt is a no-op.
	var none *account.LoginThrottle
	a, wait, err = begin(none)
	if a != nil || wait != 0 || err != nil {
		t.Fatalf("nil throttle: %v, %v, %v", a, wait, err)
	}
	if err := errors.Join(a.Failed(ctx), a.Succeeded(ctx)); err != nil {
		t.Fatal(err)
	}
	a.Abandon(ctx)
}

// slowClock is a throttle clock on which an hour passes between two looks.
func slowClock(start time.Time) func() time.Time {
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		start = start.Add(time.Hour)
		return start
	}
}

// TestLoginAttemptRenewsItsLease: an attempt in flight renews its lease
// (to the throttle's now + AttemptLease) until it is settled, however long
// its password check takes; one with renewal disabled does not.
func TestLoginAttemptRenewsItsLease(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	user := account.UserThrottleKey("acme", "alice")
	f := &fakeThrottleStore{renewed: make(chan string)}
	th := &account.LoginThrottle{Store: f, Policy: account.DefaultThrottlePolicy, Now: func() time.Time { return now }, RenewEvery: time.Millisecond}
	a, _, err := th.Begin(ctx, "acme", "alice", "192.0.2.1")
	if err != nil || a == nil {
		t.Fatalf("Begin: %v, %v", a, err)
	}
	want := fmt.Sprintf("renew %s w1 until %s", user, now.Add(account.AttemptLease).Format(time.RFC3339))
	for range 3 {
		if got := <-f.renewed; got != want {
			t.Fatalf("renewal %q, want %q", got, want)
		}
	}
	if err := a.Failed(ctx); err != nil {
		t.Fatal(err)
	}
	// Settling twice stops nothing twice.
	a.Abandon(ctx)
}

func TestThrottleStateSaturated(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	limit := account.DefaultThrottlePolicy.User
	full := saturated(now)
	for _, tc := range []struct {
		name string
		edit func(*account.ThrottleState)
		want bool
	}{
		{"full of attempts in flight", func(*account.ThrottleState) {}, true},
		{"full of failures and attempts in flight", func(s *account.ThrottleState) { s.Failures, s.Pending = 4, 1 }, true},
		{"room left", func(s *account.ThrottleState) { s.Pending = 4 }, false},
		{"full of failures", func(s *account.ThrottleState) { s.Failures, s.Pending = 5, 0 }, false},
		{"leases ended", func(s *account.ThrottleState) { s.PendingUntil = now }, false},
		{"window over", func(s *account.ThrottleState) { s.WindowEnd = now }, false},
		{"locked", func(s *account.ThrottleState) { s.LockedUntil = now.Add(time.Second) }, false},
	} {
		st := full
		tc.edit(&st)
		if got := st.Saturated(now, limit); got != tc.want {
			t.Errorf("%s: Saturated = %v, want %v", tc.name, got, tc.want)
		}
	}
}
