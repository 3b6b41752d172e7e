package http_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/account"
)

// The login throttle under real concurrent requests, against the real
// store: attempts of one user in flight take places in its window; only
// their failures lock it.

// loginsInFlight are logins sent at once, each on its own connection.
type loginsInFlight struct {
	a   *throttledAPI
	wg  sync.WaitGroup
	xs  []loginExchange
	end context.CancelFunc
}

type loginExchange struct {
	req  *http.Request
	body []byte
	resp *http.Response
	got  []byte
	err  error
}

// startLogins sends one login as user per password, all released at the
// same moment, and returns without waiting for their answers.
func (a *throttledAPI) startLogins(user string, passwords []string) *loginsInFlight {
	a.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &loginsInFlight{a: a, xs: make([]loginExchange, len(passwords)), end: cancel}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: len(passwords)}}
	start := make(chan struct{})
	for i, pw := range passwords {
		body := []byte(loginBody("acme", user, pw))
		req, err := http.NewRequestWithContext(ctx, "POST", a.srv.URL+"/login", bytes.NewReader(body))
		if err != nil {
			a.t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		p.xs[i] = loginExchange{req: req, body: body}
		p.wg.Go(func() {
			<-start
			x := &p.xs[i]
			x.resp, x.err = client.Do(x.req)
			if x.err == nil {
				x.got, x.err = io.ReadAll(x.resp.Body)
				_ = x.resp.Body.Close()
			}
		})
	}
	close(start)
	a.t.Cleanup(func() {
		cancel()
		p.wg.Wait()
		client.CloseIdleConnections()
	})
	return p
}

// responses waits for the answers, in the order of the passwords, each
// validated against the OpenAPI document.
func (p *loginsInFlight) responses() []response {
	p.a.t.Helper()
	p.wg.Wait()
	out := make([]response, len(p.xs))
	for i, x := range p.xs {
		if x.err != nil {
			p.a.t.Fatalf("login %d: %v", i, x.err)
		}
		p.a.doc.Check(p.a.t, x.req, x.body, x.resp, x.got)
		out[i] = response{status: x.resp.StatusCode, header: x.resp.Header, body: x.got}
	}
	return out
}

// abandon hangs up on every login still waiting for its answer, and waits
// until they have gone.
func (p *loginsInFlight) abandon() {
	p.end()
	p.wg.Wait()
}

// simultaneousLogins sends the logins at once and returns their answers.
func (a *throttledAPI) simultaneousLogins(user string, passwords []string) []response {
	a.t.Helper()
	return a.startLogins(user, passwords).responses()
}

// tally is "count×status" of a batch of answers, with the Retry-After
// values of its 429s, for the log and failure messages.
func tally(rs []response) string {
	counts := map[int]int{}
	var retry []string
	for _, r := range rs {
		counts[r.status]++
		if r.status == http.StatusTooManyRequests {
			retry = append(retry, r.header.Get("Retry-After"))
		}
	}
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d×%d", counts[s], s))
	}
	if len(retry) > 0 {
		slices.Sort(retry)
		parts = append(parts, "Retry-After "+strings.Join(slices.Compact(retry), ","))
	}
	return strings.Join(parts, ", ")
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestSimultaneousCorrectLoginsAreAllAllowed: a fleet of backends sharing
// one user that restarts at once logs in 10 or 20 times at the same
// moment, with the default limits (5 failures per user). Every login gets
// its tokens; none is throttled.
func TestSimultaneousCorrectLoginsAreAllAllowed(t *testing.T) {
	t.Parallel()
	a := newThrottledAPI(t, throttleSetup{policy: account.DefaultThrottlePolicy, users: []string{"alice"}})
	for _, n := range []int{10, 20} {
		for round := range 3 {
			rs := a.simultaneousLogins("alice", repeat("alice-password", n))
			t.Logf("%d simultaneous correct logins, round %d: %s", n, round, tally(rs))
			if slices.ContainsFunc(rs, func(r response) bool { return r.status != http.StatusOK }) {
				t.Errorf("%d simultaneous correct logins, round %d: %s; want %d×200", n, round, tally(rs), n)
			}
			if st := a.state(account.UserThrottleKey("acme", "alice")); st != (account.ThrottleState{}) {
				t.Errorf("user counter after %d successes: %+v, want none", n, st)
			}
		}
	}
	// No password was wrong: the address counted nothing.
	if st := a.state(account.IPThrottleKey("127.0.0.1")); st != (account.ThrottleState{}) {
		t.Errorf("address counter: %+v, want none", st)
	}
}

// TestParallelWrongGuessesStayWithinTheLimit: 20 wrong passwords at once,
// for a user that exists and for one that does not. Exactly 5 (the
// limit) have their password checked and get 401; the others wait for
// their outcome, and once those are confirmed failures get 429 with the
// full lockout. The right password is refused too while it lasts.
func TestParallelWrongGuessesStayWithinTheLimit(t *testing.T) {
	t.Parallel()
	policy := account.DefaultThrottlePolicy
	lockout := policy.User.Lockout
	a := newThrottledAPI(t, throttleSetup{policy: policy, users: []string{"alice"}})
	const guesses = 20
	for _, user := range []string{"alice", "nobody"} {
		before := a.hasher.verifications.Load()
		rs := a.simultaneousLogins(user, repeat("wrong", guesses))
		t.Logf("%d simultaneous wrong passwords for %s: %s", guesses, user, tally(rs))
		var unauthorized int
		for _, r := range rs {
			switch r.status {
			case http.StatusUnauthorized:
				unauthorized++
				r.problem(t, http.StatusUnauthorized, "invalid_credentials")
			default:
				wantThrottled(t, r, lockout)
			}
		}
		checked := a.hasher.verifications.Load() - before
		if unauthorized != policy.User.MaxFailures || checked != int64(policy.User.MaxFailures) {
			t.Fatalf("%s: %d answered 401 and %d passwords checked (%s); want %d of each",
				user, unauthorized, checked, tally(rs), policy.User.MaxFailures)
		}
		st := a.state(account.UserThrottleKey("acme", user))
		if !st.LockedUntil.Equal(a.clock.Now().Add(lockout)) || st.Failures != policy.User.MaxFailures || st.Pending != 0 {
			t.Fatalf("%s after the guesses: %+v, want locked for %v by %d failures", user, st, lockout, policy.User.MaxFailures)
		}
	}
	before := a.hasher.verifications.Load()
	wantThrottled(t, a.loginVia("", "alice", "alice-password"), lockout)
	if n := a.hasher.verifications.Load() - before; n != 0 {
		t.Fatalf("%d passwords checked during the lockout, want 0", n)
	}
	// The address counted the 10 failures, and only them.
	if st := a.state(account.IPThrottleKey("127.0.0.1")); st.Failures != 10 {
		t.Fatalf("address counter %+v, want 10 failures", st)
	}
}

// TestLoginWindowFullOfAttemptsInFlight: while the user's 5 places are
// taken by attempts whose passwords are still being checked, more logins
// wait for them, however long they take (longer than any fixed wait: the
// waiting logins look at the counter again and again), and check no
// password meanwhile. Once the 5 succeed, the waiting ones get their
// answers: a correct login is never refused because its neighbours were
// slow.
func TestLoginWindowFullOfAttemptsInFlight(t *testing.T) {
	t.Parallel()
	policy := account.DefaultThrottlePolicy
	g := newGate()
	a := newThrottledAPI(t, throttleSetup{policy: policy, gate: g, users: []string{"alice"}})
	inFlight := a.startLogins("alice", repeat("alice-password", policy.User.MaxFailures))
	await(g.entered, policy.User.MaxFailures)

	checked := a.hasher.verifications.Load()
	waiting := a.startLogins("alice", []string{"alice-password", "wrong"})
	// Some 30 looks each: seconds, longer than the fixed wait this
	// replaced (2 s).
	a.clock.awaitReads(60)
	if n := a.hasher.verifications.Load() - checked; n != 0 {
		t.Fatalf("%d passwords checked while the window was full, want 0", n)
	}
	if st := a.state(account.UserThrottleKey("acme", "alice")); !st.Saturated(a.clock.Now(), policy.User) {
		t.Fatalf("user counter %+v, want full of attempts in flight, not locked", st)
	}

	close(g.open)
	if rs := inFlight.responses(); slices.ContainsFunc(rs, func(r response) bool { return r.status != http.StatusOK }) {
		t.Fatalf("the logins in flight: %s, want all 200", tally(rs))
	}
	rs := waiting.responses()
	if rs[0].status != http.StatusOK {
		t.Fatalf("the correct login that waited: %d %s, want 200", rs[0].status, rs[0].body)
	}
	rs[1].problem(t, http.StatusUnauthorized, "invalid_credentials")
}

// TestSlowLoginsKeepTheirPlaces: attempts in flight that take longer than
// account.AttemptLease (several times over, on the throttle's clock) keep
// their places by renewing their leases, and are not counted as failures:
// a correct login that waited behind them, and they themselves, get 200.
func TestSlowLoginsKeepTheirPlaces(t *testing.T) {
	t.Parallel()
	policy := account.DefaultThrottlePolicy
	g := newGate()
	a := newThrottledAPI(t, throttleSetup{policy: policy, gate: g, renewEvery: time.Millisecond, users: []string{"alice"}})
	key := account.UserThrottleKey("acme", "alice")
	slow := a.startLogins("alice", repeat("alice-password", policy.User.MaxFailures))
	await(g.entered, policy.User.MaxFailures)
	waiting := a.startLogins("alice", []string{"alice-password"})
	for range 6 {
		// Half a lease at a time, each step once the leases have been
		// renewed from the clock's new time.
		a.clock.Advance(account.AttemptLease / 2)
		for {
			st := a.state(key)
			if st.Locked(a.clock.Now()) || st.Failures != 0 {
				t.Fatalf("slow attempts counted as failures: %+v", st)
			}
			if !st.PendingUntil.Before(a.clock.Now().Add(account.AttemptLease)) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	close(g.open)
	if rs := slow.responses(); slices.ContainsFunc(rs, func(r response) bool { return r.status != http.StatusOK }) {
		t.Fatalf("the slow logins: %s, want all 200", tally(rs))
	}
	if rs := waiting.responses(); rs[0].status != http.StatusOK {
		t.Fatalf("the correct login that waited behind them: %d %s, want 200", rs[0].status, rs[0].body)
	}
	if st := a.state(key); st != (account.ThrottleState{}) {
		t.Fatalf("user counter after the successes: %+v, want none", st)
	}
}

// TestLoginAttemptsThatStopRenewingAreReleased: attempts that stop
// renewing their leases (their replica hangs or died) hold their places
// until account.AttemptLease has passed, then lose them without counting
// as failures: the next correct login, which waited, gets its place and
// its 200, and no one is locked.
func TestLoginAttemptsThatStopRenewingAreReleased(t *testing.T) {
	t.Parallel()
	policy := account.DefaultThrottlePolicy
	g := newGate()
	a := newThrottledAPI(t, throttleSetup{policy: policy, gate: g, renewEvery: -1, users: []string{"alice"}})
	key := account.UserThrottleKey("acme", "alice")
	hung := a.startLogins("alice", repeat("alice-password", policy.User.MaxFailures))
	await(g.entered, policy.User.MaxFailures)

	a.clock.Advance(account.AttemptLease - time.Second)
	next := a.startLogins("alice", []string{"alice-password"})
	if st := a.state(key); !st.Saturated(a.clock.Now(), policy.User) {
		t.Fatalf("within the lease: %+v, want full of attempts in flight", st)
	}
	a.clock.Advance(time.Second)
	await(g.entered, 1) // the next login got a place, and checks its password
	if st := a.state(key); st.Locked(a.clock.Now()) || st.Failures != 0 || st.Pending != 1 {
		t.Fatalf("after the lease: %+v, want the hung attempts released, one in flight, no failure", st)
	}

	// The hung attempts end without an outcome (their passwords never
	// checked); then the next login's password is checked.
	hung.abandon()
	await(g.left, policy.User.MaxFailures)
	close(g.open)
	if rs := next.responses(); rs[0].status != http.StatusOK {
		t.Fatalf("the login after the hung ones: %d %s, want 200", rs[0].status, rs[0].body)
	}
	if s := a.loginStatus("alice", "alice-password"); s != http.StatusOK {
		t.Fatalf("afterwards: %d, want 200", s)
	}
}
