package storetest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/account"
)

// The login throttle tests pass their own clock to the store: t0 and
// offsets from it, so lockouts expire without sleeping.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

var testLimit = account.ThrottleLimit{MaxFailures: 3, Window: time.Minute, Lockout: 10 * time.Minute, MaxLockout: 40 * time.Minute}

// take counts one attempt and fails the test on an error or an unexpected
// allowed.
func take(t *testing.T, s account.Store, key string, now time.Time, limit account.ThrottleLimit, wantAllowed bool) account.ThrottleState {
	t.Helper()
	allowed, st, err := s.TakeLoginAttempt(context.Background(), key, now, limit)
	if err != nil {
		t.Fatalf("TakeLoginAttempt(%s, t0+%v): %v", key, now.Sub(t0), err)
	}
	if allowed != wantAllowed {
		t.Fatalf("TakeLoginAttempt(%s, t0+%v): allowed = %v, want %v (state %+v)", key, now.Sub(t0), allowed, wantAllowed, st)
	}
	return st
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
		st := take(t, s, key, t0.Add(time.Duration(i)*time.Second), testLimit, true)
		if st.Failures != i || !st.LockedUntil.IsZero() || !st.WindowEnd.Equal(t0.Add(time.Second+time.Minute)) {
			t.Fatalf("attempt %d: state %+v", i, st)
		}
	}
	// The third attempt is allowed (its password is checked) and locks.
	at := t0.Add(3 * time.Second)
	st := take(t, s, key, at, testLimit, true)
	if !st.LockedUntil.Equal(at.Add(10*time.Minute)) || st.Lockouts != 1 {
		t.Fatalf("third attempt: state %+v, want locked until t0+10m3s", st)
	}
	// Refused until the lock ends, however long the window was, and the
	// refusals are not counted.
	for _, d := range []time.Duration{4 * time.Second, 2 * time.Minute, 10*time.Minute + 2999*time.Millisecond} {
		st := take(t, s, key, t0.Add(d), testLimit, false)
		if !st.LockedUntil.Equal(at.Add(10 * time.Minute)) {
			t.Fatalf("refused at t0+%v: state %+v", d, st)
		}
	}
	if st := throttleState(t, s, key); st.Failures != 3 {
		t.Fatalf("refused attempts were counted: %+v", st)
	}
	// The lock expires: a new window starts with this attempt.
	end := at.Add(10 * time.Minute)
	if st := take(t, s, key, end, testLimit, true); st.Failures != 1 || !st.WindowEnd.Equal(end.Add(time.Minute)) || st.Lockouts != 1 {
		t.Fatalf("first attempt after the lock: state %+v", st)
	}
}

func testThrottleWindow(t *testing.T, s account.Store) {
	const key = "user:bob"
	take(t, s, key, t0, testLimit, true)
	take(t, s, key, t0.Add(59*time.Second), testLimit, true)
	// The window (one minute from the first attempt) has passed: counting
	// starts again, so three more attempts are needed to lock.
	for i := 1; i <= 2; i++ {
		if st := take(t, s, key, t0.Add(time.Minute+time.Duration(i)*time.Second), testLimit, true); st.Failures != i || !st.LockedUntil.IsZero() {
			t.Fatalf("attempt %d of the second window: state %+v", i, st)
		}
	}
	if st := take(t, s, key, t0.Add(time.Minute+3*time.Second), testLimit, true); st.LockedUntil.IsZero() {
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
			st = take(t, s, key, now, testLimit, true)
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
	take(t, s, key, t0, testLimit, true)
	take(t, s, key, t0, testLimit, true)
	if err := s.RefundLoginAttempt(ctx, key, t0); err != nil {
		t.Fatal(err)
	}
	if st := throttleState(t, s, key); st.Failures != 1 {
		t.Fatalf("after a refund: %+v, want 1 failure", st)
	}
	for range 3 { // never below zero
		if err := s.RefundLoginAttempt(ctx, key, t0); err != nil {
			t.Fatal(err)
		}
	}
	if st := throttleState(t, s, key); st.Failures != 0 {
		t.Fatalf("after refunds: %+v, want 0 failures", st)
	}
	if err := s.RefundLoginAttempt(ctx, "user:nobody", t0); err != nil {
		t.Fatalf("refund of an unknown key: %v", err)
	}
	// A refund does not lift a lock.
	for range 3 {
		take(t, s, key, t0, testLimit, true)
	}
	if err := s.RefundLoginAttempt(ctx, key, t0); err != nil {
		t.Fatal(err)
	}
	take(t, s, key, t0.Add(time.Second), testLimit, false)
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
		take(t, s, key, t0.Add(time.Second), testLimit, true)
	}
	if st := throttleState(t, s, key); st.Lockouts != 1 || !st.LockedUntil.Equal(t0.Add(time.Second+10*time.Minute)) {
		t.Fatalf("lock after a reset: %+v, want a first lockout of 10m", st)
	}
}

func testThrottleKeysAreIndependent(t *testing.T, s account.Store) {
	for range 3 {
		take(t, s, "user:alice", t0, testLimit, true)
	}
	take(t, s, "user:alice", t0, testLimit, false)
	if st := take(t, s, "user:bob", t0, testLimit, true); st.Failures != 1 {
		t.Fatalf("another key: %+v", st)
	}
	if st := take(t, s, "ip:192.0.2.1", t0, testLimit, true); st.Failures != 1 {
		t.Fatalf("an address key: %+v", st)
	}
	if err := s.ResetLoginThrottle(context.Background(), "user:bob"); err != nil {
		t.Fatal(err)
	}
	take(t, s, "user:alice", t0, testLimit, false)
}

func testThrottleConcurrentAttempts(t *testing.T, s account.Store) {
	ctx := context.Background()
	// Below the limit: 20 concurrent attempts count exactly 20, and each
	// sees a different count.
	const n = 20
	wide := account.ThrottleLimit{MaxFailures: 100, Window: time.Minute, Lockout: time.Minute}
	counts := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			allowed, st, err := s.TakeLoginAttempt(ctx, "ip:198.51.100.7", t0, wide)
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

	// Across the limit: of 20 concurrent attempts (on a new window and on
	// an open one) exactly MaxFailures get through, and the key is
	// locked once.
	for round, key := range []string{"user:fresh", "user:open"} {
		if round == 1 {
			take(t, s, key, t0, testLimit, true)
		}
		var allowed sync.Map
		for i := range n {
			wg.Go(func() {
				ok, _, err := s.TakeLoginAttempt(ctx, key, t0, testLimit)
				if err != nil {
					t.Errorf("%s attempt %d: %v", key, i, err)
				}
				allowed.Store(i, ok)
			})
		}
		wg.Wait()
		got := 0
		allowed.Range(func(_, v any) bool {
			if v.(bool) {
				got++
			}
			return true
		})
		want := testLimit.MaxFailures - round
		if got != want {
			t.Fatalf("%s: %d of %d concurrent attempts allowed, want %d", key, got, n, want)
		}
		if st := throttleState(t, s, key); st.Lockouts != 1 || !st.LockedUntil.Equal(t0.Add(testLimit.Lockout)) || st.Failures != testLimit.MaxFailures {
			t.Fatalf("%s after the race: %+v, want one lock of %v", key, st, testLimit.Lockout)
		}
	}
}

func testThrottlePurge(t *testing.T, s account.Store) {
	ctx := context.Background()
	// A counter that never locked matters until its window ends; a locked
	// one until StrikeMemory after its lock ends.
	take(t, s, "user:counted", t0, testLimit, true)
	for range 3 {
		take(t, s, "user:locked", t0, testLimit, true)
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
