package account_test

import (
	"context"
	"errors"
	"slices"
	"strings"
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
// locked (until when) or whose updates fail.
type fakeThrottleStore struct {
	account.LoginThrottleStore
	calls  []string
	locked map[string]time.Time
	fail   map[string]bool
}

func (f *fakeThrottleStore) LoginThrottleState(_ context.Context, key string) (account.ThrottleState, error) {
	f.calls = append(f.calls, "read "+key)
	if f.fail[key] {
		return account.ThrottleState{}, errors.New("database down")
	}
	return account.ThrottleState{LockedUntil: f.locked[key]}, nil
}

func (f *fakeThrottleStore) TakeLoginAttempt(_ context.Context, key string, _ time.Time, _ account.ThrottleLimit) (bool, account.ThrottleState, error) {
	f.calls = append(f.calls, "take "+key)
	if f.fail[key] {
		return false, account.ThrottleState{}, errors.New("database down")
	}
	if until, ok := f.locked[key]; ok {
		return false, account.ThrottleState{LockedUntil: until}, nil
	}
	return true, account.ThrottleState{Failures: 1}, nil
}

func (f *fakeThrottleStore) RefundLoginAttempt(_ context.Context, key string, _ time.Time) error {
	f.calls = append(f.calls, "refund "+key)
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

	// Allowed: the address is read, the user counts the attempt.
	f := &fakeThrottleStore{}
	a, wait, err := begin(newThrottle(f))
	if err != nil || wait != 0 || a == nil {
		t.Fatalf("allowed: %v, %v, %v", a, wait, err)
	}
	check("begin", f, "read "+ip, "take "+user)
	if err := a.Failed(ctx); err != nil {
		t.Fatal(err)
	}
	check("failed", f, "take "+ip)
	if err := a.Succeeded(ctx); err != nil {
		t.Fatal(err)
	}
	check("succeeded", f, "reset "+user)
	a.Abandon(ctx)
	check("abandoned", f, "refund "+user)

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

	// A store error refuses the login (fail closed).
	for _, key := range []string{ip, user} {
		f = &fakeThrottleStore{fail: map[string]bool{key: true}}
		if a, _, err := begin(newThrottle(f)); a != nil || err == nil {
			t.Errorf("store error on %s: %v, %v; want an error", key, a, err)
		}
	}
	f = &fakeThrottleStore{fail: map[string]bool{ip: true}}
	th := newThrottle(f)
	th.Policy.IP.MaxFailures = 0 // the address is not even read
	if a, _, err = begin(th); err != nil {
		t.Fatal(err)
	}
	if err := a.Failed(ctx); err != nil {
		t.Fatal(err)
	}
	check("address limit disabled", f, "take "+user)

	// No user limit: nothing to reset or refund.
	f = &fakeThrottleStore{}
	th = newThrottle(f)
	th.Policy.User.MaxFailures = 0
	if a, _, err = begin(th); err != nil {
		t.Fatal(err)
	}
	_ = a.Succeeded(ctx)
	a.Abandon(ctx)
	check("user limit disabled", f, "read "+ip)

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
