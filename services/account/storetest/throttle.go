package storetest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/account"
)

// The login throttle tests pass their own clock to the store: t0 and
// offsets from it, so lockouts expire without sleeping.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

var testLimit = account.ThrottleLimit{MaxFailures: 3, Window: time.Minute, Lockout: 10 * time.Minute, MaxLockout: 40 * time.Minute}

// testLease is the lease of the attempts in flight of these tests.
const testLease = 10 * time.Second

// take counts one failure (an attempt without a lease, as the address
// counter does) and fails the test on an error or an unexpected allowed.
func take(t *testing.T, s account.Store, key string, now time.Time, wantAllowed bool) account.ThrottleState {
	t.Helper()
	return takeLeased(t, s, key, now, 0, wantAllowed)
}

// begin takes a place for an attempt in flight (with testLease) under
// testLimit.
func begin(t *testing.T, s account.Store, key string, now time.Time, wantAllowed bool) account.ThrottleState {
	t.Helper()
	return takeLeased(t, s, key, now, testLease, wantAllowed)
}

func takeLeased(t *testing.T, s account.Store, key string, now time.Time, lease time.Duration, wantAllowed bool) account.ThrottleState {
	t.Helper()
	allowed, st, err := (account.ThrottleCounters{Store: s}).Take(context.Background(), key, now, testLimit, lease)
	if err != nil {
		t.Fatalf("TakeLoginAttempt(%s, t0+%v, lease %v): %v", key, now.Sub(t0), lease, err)
	}
	if allowed != wantAllowed {
		t.Fatalf("TakeLoginAttempt(%s, t0+%v, lease %v): allowed = %v, want %v (state %+v)", key, now.Sub(t0), lease, allowed, wantAllowed, st)
	}
	if allowed && st.Window == "" {
		t.Fatalf("TakeLoginAttempt(%s, t0+%v): allowed without a window: %+v", key, now.Sub(t0), st)
	}
	return st
}

// fail reports a failure of an attempt in flight of window.
func fail(t *testing.T, s account.Store, key, window string, now time.Time) {
	t.Helper()
	if err := (account.ThrottleCounters{Store: s}).Fail(context.Background(), key, window, now, testLimit); err != nil {
		t.Fatalf("FailLoginAttempt(%s, t0+%v): %v", key, now.Sub(t0), err)
	}
}

func throttleState(t *testing.T, s account.Store, key string) account.ThrottleState {
	t.Helper()
	st, err := s.LoginThrottleState(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func testThrottleLockout(t *testing.T, s account.Store) {
	const key = "user:alice"
	if st := throttleState(t, s, key); st != (account.ThrottleState{}) {
		t.Fatalf("unknown key: state %+v, want zero", st)
	}
	for i := 1; i <= 2; i++ {
		st := take(t, s, key, t0.Add(time.Duration(i)*time.Second), true)
		if st.Failures != i || !st.LockedUntil.IsZero() || !st.WindowEnd.Equal(t0.Add(time.Second+time.Minute)) {
			t.Fatalf("attempt %d: state %+v", i, st)
		}
	}
	// Failures counted at once (no lease: the address counter): the third
	// is counted and locks.
	at := t0.Add(3 * time.Second)
	st := take(t, s, key, at, true)
	if !st.LockedUntil.Equal(at.Add(10*time.Minute)) || st.Lockouts != 1 {
		t.Fatalf("third attempt: state %+v, want locked until t0+10m3s", st)
	}
	// Refused until the lock ends, however long the window was, and the
	// refusals are not counted.
	for _, d := range []time.Duration{4 * time.Second, 2 * time.Minute, 10*time.Minute + 2999*time.Millisecond} {
		st := take(t, s, key, t0.Add(d), false)
		if !st.LockedUntil.Equal(at.Add(10 * time.Minute)) {
			t.Fatalf("refused at t0+%v: state %+v", d, st)
		}
	}
	if st := throttleState(t, s, key); st.Failures != 3 {
		t.Fatalf("refused attempts were counted: %+v", st)
	}
	// The lock expires: a new window starts with this attempt.
	end := at.Add(10 * time.Minute)
	if st := take(t, s, key, end, true); st.Failures != 1 || !st.WindowEnd.Equal(end.Add(time.Minute)) || st.Lockouts != 1 {
		t.Fatalf("first attempt after the lock: state %+v", st)
	}
}

func testThrottleWindow(t *testing.T, s account.Store) {
	const key = "user:bob"
	take(t, s, key, t0, true)
	take(t, s, key, t0.Add(59*time.Second), true)
	// The window (one minute from the first attempt) has passed: counting
	// starts again, so three more attempts are needed to lock.
	for i := 1; i <= 2; i++ {
		if st := take(t, s, key, t0.Add(time.Minute+time.Duration(i)*time.Second), true); st.Failures != i || !st.LockedUntil.IsZero() {
			t.Fatalf("attempt %d of the second window: state %+v", i, st)
		}
	}
	if st := take(t, s, key, t0.Add(time.Minute+3*time.Second), true); st.LockedUntil.IsZero() {
		t.Fatalf("third attempt of the second window did not lock: %+v", st)
	}
}

func testThrottleLockoutGrows(t *testing.T, s account.Store) {
	const key = "ip:192.0.2.1"
	now := t0
	lockOnce := func() time.Duration {
		t.Helper()
		var st account.ThrottleState
		for range 3 {
			st = take(t, s, key, now, true)
		}
		d := st.LockedUntil.Sub(now)
		now = st.LockedUntil // come back when told
		return d
	}
	var got []time.Duration
	for range 4 {
		got = append(got, lockOnce())
	}
	want := []time.Duration{10 * time.Minute, 20 * time.Minute, 40 * time.Minute, 40 * time.Minute}
	if !slices.Equal(got, want) {
		t.Fatalf("consecutive lockouts %v, want %v (doubling up to the maximum)", got, want)
	}
	// A key quiet for StrikeMemory after its last lock starts over.
	now = now.Add(account.StrikeMemory)
	if d := lockOnce(); d != 10*time.Minute {
		t.Fatalf("lockout after a quiet day = %v, want 10m", d)
	}
}

func testThrottleResetAndRefund(t *testing.T, s account.Store) {
	ctx := context.Background()
	const key = "user:carol"
	w := begin(t, s, key, t0, true).Window
	begin(t, s, key, t0, true)
	if err := s.RefundLoginAttempt(ctx, key, w); err != nil {
		t.Fatal(err)
	}
	if st := throttleState(t, s, key); st.Failures != 0 || st.Pending != 1 {
		t.Fatalf("after a refund: %+v, want 1 attempt pending", st)
	}
	for range 3 { // never below zero
		if err := s.RefundLoginAttempt(ctx, key, w); err != nil {
			t.Fatal(err)
		}
	}
	if st := throttleState(t, s, key); st.Failures != 0 || st.Pending != 0 {
		t.Fatalf("after refunds: %+v, want nothing counted", st)
	}
	for _, tc := range []struct{ key, window string }{{"user:nobody", w}, {key, "another window"}} {
		if err := s.RefundLoginAttempt(ctx, tc.key, tc.window); err != nil {
			t.Fatalf("refund of %s in %q: %v", tc.key, tc.window, err)
		}
	}
	// Failures are not refunded, and a refund does not lift a lock.
	for range 3 {
		st := begin(t, s, key, t0, true)
		fail(t, s, key, st.Window, t0)
	}
	if err := s.RefundLoginAttempt(ctx, key, w); err != nil {
		t.Fatal(err)
	}
	take(t, s, key, t0.Add(time.Second), false)
	// A reset does, and forgets the lockout history.
	for range 2 {
		if err := s.ResetLoginThrottle(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if st := throttleState(t, s, key); st != (account.ThrottleState{}) {
		t.Fatalf("after a reset: %+v, want zero", st)
	}
	for range 3 {
		take(t, s, key, t0.Add(time.Second), true)
	}
	if st := throttleState(t, s, key); st.Lockouts != 1 || !st.LockedUntil.Equal(t0.Add(time.Second+10*time.Minute)) {
		t.Fatalf("lock after a reset: %+v, want a first lockout of 10m", st)
	}
}

// testThrottleLocksOnlyOnFailures: attempts in flight fill the window (no
// more are let through) but do not lock it; their failures do.
func testThrottleLocksOnlyOnFailures(t *testing.T, s account.Store) {
	const key = "user:dave"
	var windows []string
	for i := 1; i <= 3; i++ {
		st := begin(t, s, key, t0, true)
		if st.Pending != i || st.Failures != 0 || st.Locked(t0) || !st.PendingUntil.Equal(t0.Add(testLease)) {
			t.Fatalf("attempt %d in flight: state %+v", i, st)
		}
		windows = append(windows, st.Window)
	}
	if windows[0] != windows[1] || windows[1] != windows[2] {
		t.Fatalf("attempts of one window got windows %q", windows)
	}
	// Full of attempts in flight: refused, not locked.
	st := begin(t, s, key, t0.Add(time.Second), false)
	if st.Locked(t0.Add(time.Second)) || !st.Saturated(t0.Add(time.Second), testLimit) || st.Pending != 3 {
		t.Fatalf("window full of attempts in flight: state %+v, want saturated, not locked", st)
	}
	// Two fail: still not locked, still full.
	fail(t, s, key, windows[0], t0.Add(2*time.Second))
	fail(t, s, key, windows[1], t0.Add(2*time.Second))
	st = begin(t, s, key, t0.Add(2*time.Second), false)
	if st.Locked(t0.Add(2*time.Second)) || st.Failures != 2 || st.Pending != 1 {
		t.Fatalf("two failures, one in flight: state %+v, want not locked", st)
	}
	// The third fails: now the window holds three failures, and locks.
	at := t0.Add(3 * time.Second)
	fail(t, s, key, windows[2], at)
	st = throttleState(t, s, key)
	if !st.LockedUntil.Equal(at.Add(testLimit.Lockout)) || st.Lockouts != 1 || st.Failures != 3 || st.Pending != 0 {
		t.Fatalf("three failures: state %+v, want locked until t0+3s+%v", st, testLimit.Lockout)
	}
	begin(t, s, key, at.Add(time.Second), false)
	// A report that comes again changes nothing.
	fail(t, s, key, windows[2], at.Add(time.Second))
	if again := throttleState(t, s, key); again != st {
		t.Fatalf("a repeated report changed the state: %+v, want %+v", again, st)
	}
}

// testThrottleResetFreesTheWindow: a success frees the window filled by
// attempts in flight; their reports then concern a window that is gone.
func testThrottleResetFreesTheWindow(t *testing.T, s account.Store) {
	ctx := context.Background()
	const key = "user:erin"
	var old string
	for range 3 {
		old = begin(t, s, key, t0, true).Window
	}
	begin(t, s, key, t0, false)
	if err := s.ResetLoginThrottle(ctx, key); err != nil {
		t.Fatal(err)
	}
	st := begin(t, s, key, t0, true)
	if st.Window == old || st.Pending != 1 || st.Failures != 0 {
		t.Fatalf("first attempt after the reset: state %+v, want a new window (not %q)", st, old)
	}
	fail(t, s, key, old, t0)
	if err := s.RefundLoginAttempt(ctx, key, old); err != nil {
		t.Fatal(err)
	}
	if after := throttleState(t, s, key); after.Failures != 0 || after.Pending != 1 {
		t.Fatalf("reports for the reset window changed the new one: %+v", after)
	}
}

// testThrottleLeaseEnds: attempts that stop renewing their leases (their
// replica died) lose their places when the window's latest lease ends;
// that is no failure and locks no one. A renewed lease holds the places;
// a failure reported after its place was released still counts.
func testThrottleLeaseEnds(t *testing.T, s account.Store) {
	ctx := context.Background()
	const dead = "user:frank"
	var w string
	for range 3 {
		w = begin(t, s, dead, t0, true).Window
	}
	within := t0.Add(testLease - time.Millisecond)
	if st := begin(t, s, dead, within, false); st.Locked(within) || !st.Saturated(within, testLimit) {
		t.Fatalf("within the lease: state %+v, want full of attempts in flight, not locked", st)
	}
	end := t0.Add(testLease)
	st := begin(t, s, dead, end, true)
	if st.Locked(end) || st.Failures != 0 || st.Pending != 1 || st.Window != w {
		t.Fatalf("after the lease: state %+v, want the dead attempts released and this one in flight, in window %s", st, w)
	}
	// A late refund of a released attempt takes nothing from the others.
	if err := s.RefundLoginAttempt(ctx, dead, w); err != nil {
		t.Fatal(err)
	}
	if err := s.RefundLoginAttempt(ctx, dead, w); err != nil {
		t.Fatal(err)
	}
	if st := throttleState(t, s, dead); st.Failures != 0 || st.Pending != 0 || st.Locked(end) {
		t.Fatalf("after refunds: state %+v, want nothing counted", st)
	}

	// Renewed leases hold their places past the first lease; a renewal
	// of another window changes nothing.
	const renewed = "user:grace"
	for range 3 {
		w = begin(t, s, renewed, t0, true).Window
	}
	if err := s.RenewLoginAttempt(ctx, renewed, w, t0.Add(2*testLease)); err != nil {
		t.Fatal(err)
	}
	if err := s.RenewLoginAttempt(ctx, renewed, "another window", t0.Add(10*testLease)); err != nil {
		t.Fatal(err)
	}
	if st := begin(t, s, renewed, end, false); st.Locked(end) || !st.Saturated(end, testLimit) {
		t.Fatalf("within the renewed lease: state %+v, want full of attempts in flight", st)
	}
	later := t0.Add(2 * testLease)
	if st := begin(t, s, renewed, later, true); st.Locked(later) || st.Failures != 0 || st.Pending != 1 {
		t.Fatalf("after the renewed lease: state %+v, want the dead attempts released", st)
	}

	// Failures reported after their places were released still count:
	// three lock the key.
	const late = "user:heidi"
	for range 3 {
		w = begin(t, s, late, t0, true).Window
	}
	begin(t, s, late, end, true)
	for range 3 {
		fail(t, s, late, w, end)
	}
	if st := throttleState(t, s, late); !st.LockedUntil.Equal(end.Add(testLimit.Lockout)) {
		t.Fatalf("three failures reported after their places were released: state %+v, want locked until t0+%v", st, testLease+testLimit.Lockout)
	}
}

func testThrottleKeysAreIndependent(t *testing.T, s account.Store) {
	for range 3 {
		take(t, s, "user:alice", t0, true)
	}
	take(t, s, "user:alice", t0, false)
	if st := take(t, s, "user:bob", t0, true); st.Failures != 1 {
		t.Fatalf("another key: %+v", st)
	}
	if st := take(t, s, "ip:192.0.2.1", t0, true); st.Failures != 1 {
		t.Fatalf("an address key: %+v", st)
	}
	if err := s.ResetLoginThrottle(context.Background(), "user:bob"); err != nil {
		t.Fatal(err)
	}
	take(t, s, "user:alice", t0, false)
}

func testThrottleConcurrentAttempts(t *testing.T, s account.Store) {
	ctx := context.Background()
	// Below the limit: 20 concurrent failures count exactly 20, and each
	// sees a different count.
	const n = 20
	wide := account.ThrottleLimit{MaxFailures: 100, Window: time.Minute, Lockout: time.Minute}
	counts := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			allowed, st, err := (account.ThrottleCounters{Store: s}).Take(ctx, "ip:198.51.100.7", t0, wide, 0)
			if err != nil || !allowed {
				t.Errorf("attempt %d: allowed %v, %v", i, allowed, err)
			}
			counts[i] = st.Failures
		})
	}
	wg.Wait()
	slices.Sort(counts)
	for i, c := range counts {
		if c != i+1 {
			t.Fatalf("counts seen by 20 concurrent attempts = %v, want 1..20", counts)
		}
	}
	if st := throttleState(t, s, "ip:198.51.100.7"); st.Failures != n {
		t.Fatalf("stored count %d, want %d", st.Failures, n)
	}

	// Across the limit: of 20 concurrent failures (on a new window and on
	// an open one) exactly MaxFailures are counted, and the key is locked
	// once.
	for round, key := range []string{"ip:fresh", "ip:open"} {
		if round == 1 {
			take(t, s, key, t0, true)
		}
		got := concurrently(t, n, func(int) (account.ThrottleState, bool) {
			ok, st, err := (account.ThrottleCounters{Store: s}).Take(ctx, key, t0, testLimit, 0)
			if err != nil {
				t.Errorf("%s: %v", key, err)
			}
			return st, ok
		})
		if want := testLimit.MaxFailures - round; len(got) != want {
			t.Fatalf("%s: %d of %d concurrent failures counted, want %d", key, len(got), n, want)
		}
		if st := throttleState(t, s, key); st.Lockouts != 1 || !st.LockedUntil.Equal(t0.Add(testLimit.Lockout)) || st.Failures != testLimit.MaxFailures {
			t.Fatalf("%s after the race: %+v, want one lock of %v", key, st, testLimit.Lockout)
		}
	}
}

// concurrently runs fn n times at once and returns the states of the runs
// that returned true.
func concurrently(t *testing.T, n int, fn func(i int) (account.ThrottleState, bool)) []account.ThrottleState {
	t.Helper()
	var (
		mu  sync.Mutex
		out []account.ThrottleState
		wg  sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			if st, ok := fn(i); ok {
				mu.Lock()
				out = append(out, st)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return out
}

// testThrottleConcurrentAttemptsInFlight: however many wrong guesses race,
// at most MaxFailures are let through (to have their password checked)
// in the window; the rest are refused without a lock while those are in
// flight, and with the lock once they have failed.
func testThrottleConcurrentAttemptsInFlight(t *testing.T, s account.Store) {
	ctx := context.Background()
	const n = 20
	for round, key := range []string{"user:fresh", "user:open"} {
		var first account.ThrottleState
		if round == 1 {
			first = begin(t, s, key, t0, true)
		}
		var refusedLocked atomic.Int64
		allowed := concurrently(t, n, func(int) (account.ThrottleState, bool) {
			ok, st, err := (account.ThrottleCounters{Store: s}).Take(ctx, key, t0, testLimit, testLease)
			if err != nil {
				t.Errorf("%s: %v", key, err)
			}
			if !ok && st.Locked(t0) {
				refusedLocked.Add(1)
			}
			return st, ok
		})
		if round == 1 {
			allowed = append(allowed, first)
		}
		if len(allowed) != testLimit.MaxFailures || refusedLocked.Load() != 0 {
			t.Fatalf("%s: %d attempts let through (want %d), %d refused as locked (want 0)",
				key, len(allowed), testLimit.MaxFailures, refusedLocked.Load())
		}
		st := throttleState(t, s, key)
		if st.Pending != testLimit.MaxFailures || !st.Saturated(t0, testLimit) {
			t.Fatalf("%s with every place in flight: %+v, want saturated", key, st)
		}
		// They all fail at once: the key is locked, once.
		at := t0.Add(time.Second)
		concurrently(t, len(allowed), func(i int) (account.ThrottleState, bool) {
			if err := (account.ThrottleCounters{Store: s}).Fail(ctx, key, allowed[i].Window, at, testLimit); err != nil {
				t.Errorf("%s: %v", key, err)
			}
			return account.ThrottleState{}, false
		})
		st = throttleState(t, s, key)
		if st.Lockouts != 1 || !st.LockedUntil.Equal(at.Add(testLimit.Lockout)) || st.Failures != testLimit.MaxFailures || st.Pending != 0 {
			t.Fatalf("%s after the failures: %+v, want one lock of %v", key, st, testLimit.Lockout)
		}
		if got := concurrently(t, n, func(int) (account.ThrottleState, bool) {
			ok, st, err := (account.ThrottleCounters{Store: s}).Take(ctx, key, at, testLimit, testLease)
			if err != nil || !ok && !st.Locked(at) {
				t.Errorf("%s while locked: %v, %+v", key, err, st)
			}
			return st, ok
		}); len(got) != 0 {
			t.Fatalf("%s: %d attempts let through while locked", key, len(got))
		}
	}
}

// testThrottleConcurrentSuccessesNeverLock: 20 logins of one user at once
// that all succeed. MaxFailures of them get a place at once, the others are
// refused without a lock while those are in flight; then, as each success
// frees the window, the others get through, and none ever sees a lock.
func testThrottleConcurrentSuccessesNeverLock(t *testing.T, s account.Store) {
	ctx := context.Background()
	const key = "user:fleet"
	const n = 20
	ask := func(i int) (bool, error) {
		ok, st, err := (account.ThrottleCounters{Store: s}).Take(ctx, key, t0, testLimit, testLease)
		if err == nil && !ok && st.Locked(t0) {
			err = fmt.Errorf("refused with a lock: %+v", st)
		}
		return ok, err
	}
	var first, waiting []int
	var mu sync.Mutex
	concurrently(t, n, func(i int) (account.ThrottleState, bool) {
		ok, err := ask(i)
		if err != nil {
			t.Errorf("login %d: %v", i, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if ok {
			first = append(first, i)
		} else {
			waiting = append(waiting, i)
		}
		return account.ThrottleState{}, false
	})
	if len(first) != testLimit.MaxFailures {
		t.Fatalf("%d of %d logins got a place at once, want %d", len(first), n, testLimit.MaxFailures)
	}
	// The first succeed while the others keep asking; each that gets a
	// place succeeds too.
	var through atomic.Int64
	succeed := func(i int) {
		if err := s.ResetLoginThrottle(ctx, key); err != nil {
			t.Errorf("login %d: %v", i, err)
		}
		through.Add(1)
	}
	var wg sync.WaitGroup
	for _, i := range first {
		wg.Go(func() { succeed(i) })
	}
	for _, i := range waiting {
		wg.Go(func() {
			for range 100000 {
				ok, err := ask(i)
				if err != nil {
					t.Errorf("login %d: %v", i, err)
					return
				}
				if ok {
					succeed(i)
					return
				}
				runtime.Gosched()
			}
			t.Errorf("login %d: never got a place", i)
		})
	}
	wg.Wait()
	if through.Load() != n {
		t.Fatalf("%d of %d succeeding logins got through", through.Load(), n)
	}
	if st := throttleState(t, s, key); st != (account.ThrottleState{}) {
		t.Fatalf("after the successes: %+v, want nothing", st)
	}
}

func testThrottlePurge(t *testing.T, s account.Store) {
	ctx := context.Background()
	// A counter that never locked matters until its window ends; a locked
	// one until StrikeMemory after its lock ends.
	take(t, s, "user:counted", t0, true)
	for range 3 {
		take(t, s, "user:locked", t0, true)
	}
	for _, tc := range []struct {
		at   time.Duration
		want int64
	}{
		{time.Minute - time.Millisecond, 0},
		{time.Minute + time.Millisecond, 1},
		{testLimit.Lockout + account.StrikeMemory - time.Millisecond, 0},
		{testLimit.Lockout + account.StrikeMemory + time.Millisecond, 1},
	} {
		n, err := s.PurgeLoginThrottle(ctx, t0.Add(tc.at))
		if err != nil || n != tc.want {
			t.Fatalf("purge at t0+%v: %d, %v; want %d", tc.at, n, err, tc.want)
		}
	}
	for _, key := range []string{"user:counted", "user:locked"} {
		if st := throttleState(t, s, key); st != (account.ThrottleState{}) {
			t.Errorf("%s survived the purge: %+v", key, st)
		}
	}
}
