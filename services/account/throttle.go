package account

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Login throttling: failed logins are counted per account name + username
// and per client address, in the database so that every replica sees the
// same counters. A key whose window holds its limit of failures is locked:
// a login is then refused (429 with Retry-After) before any password work.
//
// The user counter takes a place for each attempt when it starts, so that
// parallel guesses cannot overrun the limit; a failure keeps the place, a
// success frees every place, an attempt never checked gives it back, and
// one whose replica died loses it when its lease ends. Only failures lock.
// The address counter counts failures only: many users may share one.

// AttemptLease is how long an attempt in flight holds its place in the
// user's window without renewing it. A running attempt renews it (every
// LoginThrottle.RenewEvery), however long its password check takes on a
// loaded machine; an attempt that has not renewed it for AttemptLease is
// presumed dead with its replica, and its place is released, not counted
// as a failure. Releasing a dead replica's place may let one more password
// be checked in that window (fail open for crashes only, which a caller
// cannot cause); counting it would lock a user out for a crash, and
// counting slowness as failure would refuse correct logins on a busy
// machine.
const AttemptLease = 10 * time.Second

// DefaultRenewEvery is how often, by default, an attempt in flight renews
// its lease: often enough that a few renewals may be lost or late before
// the lease ends.
const DefaultRenewEvery = AttemptLease / 4

// SaturatedRetryAfter is the Retry-After of a login refused because the
// user's window stayed full of attempts in flight while it waited (its
// client went away, or an explicit LoginThrottle.QueueWait passed):
// about the time attempts take to finish, after which their successes have
// freed the window or their failures have locked it.
const SaturatedRetryAfter = 2 * time.Second

// StrikeMemory is how long a key remembers its last lockout: a key locked
// again within StrikeMemory of the end of its previous lockout is locked for
// twice as long as the last time (up to ThrottleLimit.MaxLockout).
const StrikeMemory = 24 * time.Hour

// ThrottleLimit is the rule for one kind of key.
type ThrottleLimit struct {
	// MaxFailures failures within Window lock the key, and no more than
	// MaxFailures attempts of a window are let through while their outcome
	// is unknown; 0 disables the limit.
	MaxFailures int
	// Window starts at the first counted attempt; when it has passed, the
	// count starts again from zero.
	Window time.Duration
	// Lockout is how long the first lock lasts. Each further lock within
	// StrikeMemory doubles it, up to MaxLockout (a MaxLockout below Lockout
	// means Lockout: no growth).
	Lockout    time.Duration
	MaxLockout time.Duration
}

// Enabled reports whether the limit throttles at all.
func (l ThrottleLimit) Enabled() bool { return l.MaxFailures > 0 }

// Validate checks an enabled limit.
func (l ThrottleLimit) Validate() error {
	if l.Enabled() && (l.Window <= 0 || l.Lockout <= 0) {
		return fmt.Errorf("login throttle: window (%v) and lockout (%v) must be positive", l.Window, l.Lockout)
	}
	return nil
}

// LockoutFor returns how long the lockout-th lock of a key (1 for the first)
// lasts: Lockout, doubling with each further lock, capped at MaxLockout.
func (l ThrottleLimit) LockoutFor(lockout int) time.Duration {
	d, ceiling := l.Lockout, max(l.MaxLockout, l.Lockout)
	for i := 1; i < lockout && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// NextLock returns, for a key in state prev that reaches its limit at now,
// until when it is locked and its new lockout count: one more than before
// when the previous lock ended less than StrikeMemory ago, else 1.
func (l ThrottleLimit) NextLock(prev ThrottleState, now time.Time) (until time.Time, lockouts int) {
	lockouts = 1
	if !prev.LockedUntil.IsZero() && now.Sub(prev.LockedUntil) < StrikeMemory {
		lockouts = prev.Lockouts + 1
	}
	return now.Add(l.LockoutFor(lockouts)), lockouts
}

// ThrottlePolicy holds the limits of both kinds of key.
type ThrottlePolicy struct {
	// User limits attempts per account name + username, whether or not
	// they exist.
	User ThrottleLimit
	// IP limits attempts per client address (an IPv6 address counts as its
	// /64 prefix). It should be far higher than User: many users may share
	// one address (offices, NAT).
	IP ThrottleLimit
}

// DefaultThrottlePolicy: 5 failures per user or 100 per address within 15
// minutes lock for 15 minutes, then 30, 60, ... up to 4 hours.
var DefaultThrottlePolicy = ThrottlePolicy{
	User: ThrottleLimit{MaxFailures: 5, Window: 15 * time.Minute, Lockout: 15 * time.Minute, MaxLockout: 4 * time.Hour},
	IP:   ThrottleLimit{MaxFailures: 100, Window: 15 * time.Minute, Lockout: 15 * time.Minute, MaxLockout: 4 * time.Hour},
}

// Validate checks both limits.
func (p ThrottlePolicy) Validate() error {
	return errors.Join(p.User.Validate(), p.IP.Validate())
}

// ThrottleState is a key's counter as stored.
type ThrottleState struct {
	// Window identifies the key's current window (opaque; a new window
	// gets a new one). An attempt reports its outcome with the Window it
	// was counted in, so that a report that comes after the window was
	// reset or replaced changes nothing.
	Window string
	// Failures is the number of failed attempts in the window that ends at
	// WindowEnd (stale once WindowEnd has passed).
	Failures  int
	WindowEnd time.Time
	// Pending is the number of attempts of the window still in flight:
	// their places are taken, their outcome not reported yet. They hold
	// their places until PendingUntil (the latest lease, renewed while they
	// run); attempts still pending then are released (not failures).
	Pending      int
	PendingUntil time.Time
	// LockedUntil is the end of the key's latest lock (in the past when the
	// key is not locked now; zero when it never was).
	LockedUntil time.Time
	// Lockouts counts the locks in a row (see StrikeMemory).
	Lockouts int
}

// Locked reports whether the key is locked at now.
func (s ThrottleState) Locked(now time.Time) bool { return s.LockedUntil.After(now) }

// Saturated reports whether, at now, the key's window is full under limit
// with attempts still in flight among them (and not locked): a new attempt
// has to wait for their outcome.
func (s ThrottleState) Saturated(now time.Time, limit ThrottleLimit) bool {
	return !s.Locked(now) && s.WindowEnd.After(now) && s.Pending > 0 && s.PendingUntil.After(now) &&
		s.Failures+s.Pending >= limit.MaxFailures
}

// full reports whether, at now, the key's open window holds limit's
// number of attempts (failed or pending).
func (s ThrottleState) full(now time.Time, limit ThrottleLimit) bool {
	return s.WindowEnd.After(now) && s.Failures+s.Pending >= limit.MaxFailures
}

// fullOfFailures reports whether the key's open window is full of failures
// alone: the key is to be locked.
func (s ThrottleState) fullOfFailures(now time.Time, limit ThrottleLimit) bool {
	return s.full(now, limit) && s.Pending == 0
}

// leasesEnded reports whether the key's open window has pending attempts
// whose leases have all ended: their places are to be released.
func (s ThrottleState) leasesEnded(now time.Time) bool {
	return s.WindowEnd.After(now) && s.Pending > 0 && !s.PendingUntil.After(now)
}

// ThrottleAttempt is one attempt for a store to count, as the rules
// computed it.
type ThrottleAttempt struct {
	Now time.Time
	// Max is how many attempts a window may hold.
	Max int
	// WindowEnd ends the window the attempt opens when the key has none
	// open.
	WindowEnd time.Time
	// Pending counts the attempt as in flight until PendingUntil; otherwise
	// it is a failure at once.
	Pending      bool
	PendingUntil time.Time
}

// ThrottleLock is a lock for a store to set on a key whose window Window is
// full of failures.
type ThrottleLock struct {
	Window   string
	Now      time.Time
	Max      int
	Until    time.Time
	Lockouts int
	// ForgetAt is when the counter stops mattering (PurgeLoginThrottle).
	ForgetAt time.Time
}

// LoginThrottleStore keeps the counters; ThrottleCounters applies the rules
// to them. Each method is one or a few single-document conditional
// updates, so that concurrent attempts on any number of replicas are
// counted exactly; the conditions are the ones each method names, and
// times are passed in (the caller's clock).
type LoginThrottleStore interface {
	// AddLoginAttempt counts a in key's counter: in the window open at
	// a.Now while the key is not locked, holds fewer than a.Max attempts
	// and no pending attempt whose lease has ended; or in a new window
	// ending at a.WindowEnd when the key has no open window and is not
	// locked. When neither applies it changes nothing and returns the
	// state read (the zero state when there is none).
	AddLoginAttempt(ctx context.Context, key string, a ThrottleAttempt) (counted bool, st ThrottleState, err error)
	// SettleLoginFailure turns a pending attempt of window into a failure;
	// ok is false when window is not key's or has no attempt pending.
	SettleLoginFailure(ctx context.Context, key, window string) (st ThrottleState, ok bool, err error)
	// AddLoginFailure counts a failure in window while it is key's, open
	// at now and not locked; ok is false otherwise.
	AddLoginFailure(ctx context.Context, key, window string, now time.Time) (st ThrottleState, ok bool, err error)
	// LockLoginThrottle sets l on key while l.Window is its window, open at
	// l.Now, holding at least l.Max attempts and none pending; of
	// concurrent callers one sets it. It returns the key's state after.
	LockLoginThrottle(ctx context.Context, key string, l ThrottleLock) (ThrottleState, error)
	// ReleaseLoginAttempts gives back the places of st's pending attempts,
	// counted as nothing, while key's counter is still st.
	ReleaseLoginAttempts(ctx context.Context, key string, st ThrottleState) error
	// RenewLoginAttempt extends the leases of window's pending attempts
	// to at least until; it changes nothing once the window is gone or
	// has no pending attempt left.
	RenewLoginAttempt(ctx context.Context, key, window string, until time.Time) error
	// RefundLoginAttempt takes back a pending attempt of window: its
	// password was never checked. It changes nothing once the window is
	// gone or has no pending attempt left.
	RefundLoginAttempt(ctx context.Context, key, window string) error
	// ResetLoginThrottle forgets key: its count, pending attempts, lock and
	// lockout history.
	ResetLoginThrottle(ctx context.Context, key string) error
	// LoginThrottleState returns key's stored state; the zero state for an
	// unknown key.
	LoginThrottleState(ctx context.Context, key string) (ThrottleState, error)
	// PurgeLoginThrottle deletes the counters whose ForgetAt and window
	// end have passed at t, and returns how many.
	PurgeLoginThrottle(ctx context.Context, t time.Time) (int64, error)
}

// throttleRounds bounds the retries of ThrottleCounters.Take when
// concurrent attempts keep changing the counter under it; each round makes
// progress for some attempt.
const throttleRounds = 5

// ThrottleCounters applies the throttle's rules to a store's counters.
type ThrottleCounters struct{ Store LoginThrottleStore }

// Take counts one attempt of key at now under limit. It refuses (allowed
// false, nothing counted) while the key is locked at now, or while the
// window already holds limit.MaxFailures attempts (failed or pending).
// The returned state is the key's after the call.
//
// With a positive lease the attempt is pending until now+lease: its
// outcome is reported with Fail, RefundLoginAttempt or
// ResetLoginThrottle, and st.Window. With lease 0 it is a failure at once
// (the address counter counts failures only). A window full of failures
// locks the key until limit.NextLock; pending attempts whose leases have
// ended are released, not counted.
func (c ThrottleCounters) Take(ctx context.Context, key string, now time.Time, limit ThrottleLimit, lease time.Duration) (allowed bool, st ThrottleState, err error) {
	if !limit.Enabled() {
		return true, ThrottleState{}, nil
	}
	a := ThrottleAttempt{Now: now, Max: limit.MaxFailures, WindowEnd: now.Add(limit.Window), PendingUntil: now}
	if lease > 0 {
		a.Pending, a.PendingUntil = true, now.Add(lease)
	}
	for range throttleRounds {
		counted, st, err := c.Store.AddLoginAttempt(ctx, key, a)
		if err != nil {
			return false, ThrottleState{}, err
		}
		if counted {
			if st.fullOfFailures(now, limit) {
				st, err = c.lock(ctx, key, st, now, limit)
			}
			return err == nil, st, err
		}
		switch {
		case st.Locked(now):
			return false, st, nil
		case st.leasesEnded(now):
			// Their replica died: release the places, then go round.
			if err := c.Store.ReleaseLoginAttempts(ctx, key, st); err != nil {
				return false, ThrottleState{}, err
			}
		case st.fullOfFailures(now, limit):
			// The last failure did not set the lock (or died first).
			st, err = c.lock(ctx, key, st, now, limit)
			return false, st, err
		case st.full(now, limit):
			return false, st, nil // wait for the attempts in flight
		}
	}
	// Contended every round: refuse for a moment (the caller retries).
	return false, ThrottleState{}, nil
}

// Fail reports that a pending attempt of window failed, locking the key
// when that fills the window with failures. A failure reported after its
// place was released (its lease ended) still counts while window is the
// key's open, unlocked window; a report for any other window changes
// nothing.
func (c ThrottleCounters) Fail(ctx context.Context, key, window string, now time.Time, limit ThrottleLimit) error {
	st, ok, err := c.Store.SettleLoginFailure(ctx, key, window)
	if err == nil && !ok {
		st, ok, err = c.Store.AddLoginFailure(ctx, key, window, now)
	}
	if err != nil || !ok {
		return err
	}
	if limit.Enabled() && st.fullOfFailures(now, limit) {
		_, err = c.lock(ctx, key, st, now, limit)
	}
	return err
}

// lock locks key, whose window st is full of failures, until
// limit.NextLock.
func (c ThrottleCounters) lock(ctx context.Context, key string, st ThrottleState, now time.Time, limit ThrottleLimit) (ThrottleState, error) {
	until, lockouts := limit.NextLock(st, now)
	return c.Store.LockLoginThrottle(ctx, key, ThrottleLock{
		Window: st.Window, Now: now, Max: limit.MaxFailures,
		Until: until, Lockouts: lockouts, ForgetAt: until.Add(StrikeMemory),
	})
}

// UserThrottleKey is the counter key of an account name + username as typed
// at login, normalized like the names themselves. It is a hash: the key
// exists for names that do not (so the answer tells nothing about them), and
// what someone typed as a username (sometimes a password) is not stored.
func UserThrottleKey(accountName, username string) string {
	a, u := NormalizeName(accountName), NormalizeName(username)
	sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s:%s", len(a), a, u))
	return "user:" + hex.EncodeToString(sum[:])
}

// IPThrottleKey is the counter key of a client address: the address itself
// for IPv4 (and IPv4-mapped IPv6), the /64 prefix for IPv6, since one
// subscriber commonly holds a whole /64. A string that is not an address
// is used as it is.
func IPThrottleKey(ip string) string {
	addr, err := netip.ParseAddr(strings.TrimSpace(ip))
	if err != nil {
		return "ip:" + ip
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		return "ip:" + netip.PrefixFrom(addr, 64).Masked().String()
	}
	return "ip:" + addr.String()
}

// LoginThrottle applies a ThrottlePolicy. A nil *LoginThrottle throttles
// nothing.
type LoginThrottle struct {
	Store  LoginThrottleStore
	Policy ThrottlePolicy
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// QueueWait, when positive, bounds how long (on the throttle's clock)
	// Begin waits for a place in a user's window that attempts still in
	// flight fill. 0, the default, waits as long as they run: they renew
	// their leases only while they work, each ends in the time a password
	// check and its settling take, and the client's going away ends the
	// wait too.
	QueueWait time.Duration
	// RenewEvery is how often an attempt in flight renews its lease; 0
	// means DefaultRenewEvery, a negative value never (for tests that play
	// a replica that died).
	RenewEvery time.Duration
	// SettleTimeout bounds each update made after the password check (they
	// run even when the client has gone away); 0 means
	// DefaultSettleTimeout. It must stay well below AttemptLease, after
	// which an attempt that has stopped renewing loses its place.
	SettleTimeout time.Duration
}

// DefaultSettleTimeout is LoginThrottle.SettleTimeout's default: an update
// of one counter document that takes longer means the database is in
// trouble, and the attempt answers 503.
const DefaultSettleTimeout = 5 * time.Second

// The waits between two looks at a window full of attempts in flight:
// short at first (an attempt takes milliseconds to tens of milliseconds),
// then no more often than maxQueuePoll, each with some jitter so that the
// waiting logins do not all look at once.
const (
	firstQueuePoll = 5 * time.Millisecond
	maxQueuePoll   = 100 * time.Millisecond
)

// Begin is called before any password work. While the client's address or
// the account name + username is locked it returns the time to wait
// (retryAfter > 0, at least one second) and counts nothing. While the
// user's window is full of attempts still in flight it waits for them (up
// to QueueWait, when set): their successes free the window, their failures
// lock it. If it is still full when the client goes away (or QueueWait
// passes), retryAfter is SaturatedRetryAfter. Otherwise it takes a place
// for the attempt in the user's window, renewed until the attempt is
// settled, and returns the attempt, to be settled with exactly one of
// Failed, Succeeded or Abandon. An error means the counters could not be read or written:
// the caller must refuse the login (fail closed).
func (t *LoginThrottle) Begin(ctx context.Context, accountName, username, clientIP string) (a *LoginAttempt, retryAfter time.Duration, err error) {
	if t == nil {
		return nil, 0, nil
	}
	now := t.now()
	a = &LoginAttempt{throttle: t, ip: IPThrottleKey(clientIP)}
	// The address first: a locked address then leaves the user counters
	// alone, so it cannot lock anyone out any further.
	if t.Policy.IP.Enabled() {
		st, err := t.Store.LoginThrottleState(ctx, a.ip)
		if err != nil {
			return nil, 0, fmt.Errorf("login throttle: %w", err)
		}
		if st.Locked(now) {
			return nil, waitFor(st, now), nil
		}
	}
	if t.Policy.User.Enabled() {
		user := UserThrottleKey(accountName, username)
		window, retryAfter, err := t.takePlace(ctx, user)
		if err != nil || retryAfter > 0 {
			return nil, retryAfter, err
		}
		a.user, a.window = user, window
		a.renewing(ctx)
	}
	return a, 0, nil
}

// renewing renews the attempt's lease until it is settled, or until its
// request has ended (then only its settling is left, which SettleTimeout
// bounds well within a lease).
func (a *LoginAttempt) renewing(ctx context.Context) {
	every := cmp.Or(a.throttle.RenewEvery, DefaultRenewEvery)
	if every < 0 {
		return
	}
	settled := make(chan struct{})
	a.settled = sync.OnceFunc(func() { close(settled) })
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-settled:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// A renewal that fails is retried at the next tick; the lease
			// outlasts several.
			rctx, cancel := a.throttle.settleContext(ctx)
			_ = a.throttle.Store.RenewLoginAttempt(rctx, a.user, a.window, a.throttle.now().Add(AttemptLease))
			cancel()
		}
	}()
}

// settle stops renewing the attempt's lease.
func (a *LoginAttempt) settle() {
	if a.settled != nil {
		a.settled()
	}
}

// takePlace takes a place for an attempt in key's window and returns the
// window; or the time to wait when the key is locked, or when its window
// stays full of attempts in flight until the client goes away (or
// QueueWait passes). While it is full, the counter is only read (one cheap
// lookup per poll), not updated.
func (t *LoginThrottle) takePlace(ctx context.Context, key string) (window string, retryAfter time.Duration, err error) {
	limit := t.Policy.User
	var deadline time.Time
	if t.QueueWait > 0 {
		deadline = t.now().Add(t.QueueWait)
	}
	poll := firstQueuePoll
	for {
		now := t.now()
		allowed, st, err := ThrottleCounters{t.Store}.Take(ctx, key, now, limit, AttemptLease)
		if err != nil {
			return "", 0, fmt.Errorf("login throttle: %w", err)
		}
		if allowed {
			return st.Window, 0, nil
		}
		if st.Locked(now) {
			return "", waitFor(st, now), nil
		}
		// Full of attempts in flight (or, rarely, contended for every
		// round): wait until that changes, or QueueWait has passed.
		for {
			if !deadline.IsZero() && !t.now().Before(deadline) {
				return "", SaturatedRetryAfter, nil
			}
			select {
			case <-ctx.Done():
				// The client has gone: no one reads the answer.
				return "", SaturatedRetryAfter, nil
			case <-time.After(poll/2 + rand.N(poll)):
			}
			poll = min(2*poll, maxQueuePoll)
			st, err := t.Store.LoginThrottleState(ctx, key)
			if err != nil {
				return "", 0, fmt.Errorf("login throttle: %w", err)
			}
			if !st.Saturated(t.now(), limit) {
				break
			}
		}
	}
}

// waitFor is the Retry-After of a refusal: until the lock ends, at least a
// second.
func waitFor(st ThrottleState, now time.Time) time.Duration {
	return max(st.LockedUntil.Sub(now), time.Second)
}

func (t *LoginThrottle) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// LoginAttempt is an attempt allowed by Begin. A nil *LoginAttempt (no
// throttle) settles as a no-op.
type LoginAttempt struct {
	throttle *LoginThrottle
	ip       string
	user     string // the user key, when the attempt has a place in its window
	window   string // the user's window it has its place in
	settled  func() // stops the renewal of its lease; nil when there is none
}

// settleContext outlives the request's cancellation: a client that hangs
// up after its password was checked must not save the attempt from being
// counted. It keeps the request's deadline when that comes sooner (the
// request's database budget, in the service): an update that cannot be
// made in time fails the login with a 503, which tells nothing of the
// password, and its place is released when its lease ends.
func (th *LoginThrottle) settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := th.SettleTimeout
	if d <= 0 {
		d = DefaultSettleTimeout
	}
	deadline := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	return context.WithDeadline(context.WithoutCancel(ctx), deadline)
}

// Failed records a wrong password: the user's attempt becomes a confirmed
// failure (which locks the user when it is the last one the window
// allows), and the address counts a failure.
func (a *LoginAttempt) Failed(ctx context.Context) error {
	if a == nil {
		return nil
	}
	a.settle()
	th := a.throttle
	ctx, cancel := th.settleContext(ctx)
	defer cancel()
	if a.user != "" {
		if err := (ThrottleCounters{th.Store}).Fail(ctx, a.user, a.window, th.now(), th.Policy.User); err != nil {
			return fmt.Errorf("login throttle: %w", err)
		}
	}
	if th.Policy.IP.Enabled() {
		// Not allowed means locked already: nothing more to count.
		if _, _, err := (ThrottleCounters{th.Store}).Take(ctx, a.ip, th.now(), th.Policy.IP, 0); err != nil {
			return fmt.Errorf("login throttle: %w", err)
		}
	}
	return nil
}

// Succeeded resets the user's counter, lock and lockout history. That
// frees the places of the user's other attempts in flight too: their
// outcomes are forgotten with the rest.
func (a *LoginAttempt) Succeeded(ctx context.Context) error {
	if a == nil || a.user == "" {
		return nil
	}
	a.settle()
	ctx, cancel := a.throttle.settleContext(ctx)
	defer cancel()
	if err := a.throttle.Store.ResetLoginThrottle(ctx, a.user); err != nil {
		return fmt.Errorf("login throttle: %w", err)
	}
	return nil
}

// Abandon gives the attempt's place back: its password was never checked
// (hashing at capacity, a database error), so it told the caller nothing.
// A refund that fails leaves the place taken until its lease ends.
func (a *LoginAttempt) Abandon(ctx context.Context) {
	if a == nil || a.user == "" {
		return
	}
	a.settle()
	ctx, cancel := a.throttle.settleContext(ctx)
	defer cancel()
	_ = a.throttle.Store.RefundLoginAttempt(ctx, a.user, a.window)
}
