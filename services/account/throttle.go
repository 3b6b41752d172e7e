package account

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Login throttling (contract section 6): failed logins are counted per
// account name + username and per client address, in the database so that
// every replica sees the same counters. A key that reaches its limit within
// the window is locked: while locked, a login is refused (429 with
// Retry-After) before any password work, whatever the password.
//
// The user counter counts an attempt when it starts (LoginThrottle.Begin),
// not when its password turns out wrong, so that a burst of parallel
// guesses at one account cannot overrun the limit while the first of them
// are still being verified. A success resets it (which also lifts a lock
// that the burst of a legitimate user set); an attempt whose password was
// never checked (hashing at capacity, a database error) is taken back.
//
// The address counter counts failures only, when they happen: many users
// may share an address, and their successful logins, however many at
// once, must never lock it. Parallel failures from one address can overrun
// its limit by the number of passwords being verified at that moment,
// which the hashing concurrency limit bounds.

// StrikeMemory is how long a key remembers its last lockout: a key locked
// again within StrikeMemory of the end of its previous lockout is locked for
// twice as long as the last time (up to ThrottleLimit.MaxLockout).
const StrikeMemory = 24 * time.Hour

// ThrottleLimit is the rule for one kind of key.
type ThrottleLimit struct {
	// MaxFailures attempts within Window lock the key; 0 disables the limit.
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
	// Failures is the number of attempts counted in the window that ends at
	// WindowEnd (stale once WindowEnd has passed).
	Failures  int
	WindowEnd time.Time
	// LockedUntil is the end of the key's latest lock (in the past when the
	// key is not locked now; zero when it never was).
	LockedUntil time.Time
	// Lockouts counts the locks in a row (see StrikeMemory).
	Lockouts int
}

// LoginThrottleStore keeps the counters. Every method is one or a few
// single-document atomic updates, so that concurrent attempts on any
// number of replicas are counted exactly. Times are passed in (the caller's
// clock), which keeps the rules testable.
type LoginThrottleStore interface {
	// TakeLoginAttempt counts one attempt of key at now under limit. It
	// refuses (allowed false, nothing counted) while the key is locked at
	// now, or when the window already holds limit.MaxFailures attempts. The
	// attempt that reaches MaxFailures is allowed and locks the key, until
	// limit.NextLock. The returned state is the key's after the call.
	TakeLoginAttempt(ctx context.Context, key string, now time.Time, limit ThrottleLimit) (allowed bool, st ThrottleState, err error)
	// RefundLoginAttempt takes one counted attempt back, if the window that
	// was open at now still is. A lock already set stays.
	RefundLoginAttempt(ctx context.Context, key string, now time.Time) error
	// ResetLoginThrottle forgets key: its count, lock and lockout history.
	ResetLoginThrottle(ctx context.Context, key string) error
	// LoginThrottleState returns key's stored state; the zero state for an
	// unknown key.
	LoginThrottleState(ctx context.Context, key string) (ThrottleState, error)
	// PurgeLoginThrottle deletes the counters that no longer matter at t
	// (window over, and StrikeMemory past the end of their last lock), and
	// returns how many.
	PurgeLoginThrottle(ctx context.Context, t time.Time) (int64, error)
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
}

// settleTimeout bounds the updates made after the password check, which
// run even when the client has gone away.
const settleTimeout = 5 * time.Second

// Begin is called before any password work. While the client's address or
// the account name + username is locked it returns the time to wait
// (retryAfter > 0, at least one second) and counts nothing. Otherwise it
// counts the attempt against the user and returns it, to be settled with
// exactly one of Failed, Succeeded or Abandon. An error means the counters
// could not be read or written: the caller must refuse the login (fail
// closed).
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
		if st.LockedUntil.After(now) {
			return nil, waitFor(st, now), nil
		}
	}
	if t.Policy.User.Enabled() {
		user := UserThrottleKey(accountName, username)
		allowed, st, err := t.Store.TakeLoginAttempt(ctx, user, now, t.Policy.User)
		if err != nil {
			return nil, 0, fmt.Errorf("login throttle: %w", err)
		}
		if !allowed {
			return nil, waitFor(st, now), nil
		}
		a.user, a.taken = user, now
	}
	return a, 0, nil
}

// waitFor is the Retry-After of a refusal: until the lock ends, at least a
// second (a lock that another attempt is setting right now may not be
// visible yet).
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
	user     string    // the user key, when counted
	taken    time.Time // when the user counter counted it
}

// settleContext outlives the request: a client that hangs up after its
// password was checked must not save the attempt from being counted.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}

// Failed records a wrong password: the address counts a failure (the user
// counted the attempt in Begin already).
func (a *LoginAttempt) Failed(ctx context.Context) error {
	if a == nil || !a.throttle.Policy.IP.Enabled() {
		return nil
	}
	ctx, cancel := settleContext(ctx)
	defer cancel()
	// Not allowed means locked already: nothing more to count.
	if _, _, err := a.throttle.Store.TakeLoginAttempt(ctx, a.ip, a.throttle.now(), a.throttle.Policy.IP); err != nil {
		return fmt.Errorf("login throttle: %w", err)
	}
	return nil
}

// Succeeded resets the user's counter, lock and lockout history.
func (a *LoginAttempt) Succeeded(ctx context.Context) error {
	if a == nil || a.user == "" {
		return nil
	}
	ctx, cancel := settleContext(ctx)
	defer cancel()
	if err := a.throttle.Store.ResetLoginThrottle(ctx, a.user); err != nil {
		return fmt.Errorf("login throttle: %w", err)
	}
	return nil
}

// Abandon takes the attempt back from the user counter: its password was
// never checked (hashing at capacity, a database error), so it told the
// caller nothing. A refund that fails leaves the attempt counted (fail
// closed), and so does one after the attempt locked the key.
func (a *LoginAttempt) Abandon(ctx context.Context) {
	if a == nil || a.user == "" {
		return
	}
	ctx, cancel := settleContext(ctx)
	defer cancel()
	_ = a.throttle.Store.RefundLoginAttempt(ctx, a.user, a.taken)
}
