package http_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/testkit/openapitest"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
	"github.com/acme/platform/services/account/mongostore"
	"github.com/acme/platform/services/account/password"
)

// clock is the login throttle's clock in these tests: lockouts expire when
// the test moves it, not by sleeping.
type clock struct {
	mu    sync.Mutex
	now   time.Time
	reads int // how often Now was called: each look of a waiting login
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.now
}

// awaitReads returns once Now has been called n more times than when
// awaitReads was called: a login waiting for a place looks at the clock
// each time it looks at the counter.
func (c *clock) awaitReads(n int) {
	c.mu.Lock()
	want := c.reads + n
	c.mu.Unlock()
	for {
		c.mu.Lock()
		got := c.reads
		c.mu.Unlock()
		if got >= want {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// countingHasher counts the password verifications, to prove that a
// refused login costs none. With a gate, each verification first announces
// itself on gate.entered, then waits until gate.open is closed, or until
// its request is cancelled (then it fails, and announces that on
// gate.left): attempts held in flight for as long as a test needs.
type countingHasher struct {
	account.PasswordHasher
	verifications atomic.Int64
	gate          *gate
}

type gate struct {
	entered chan struct{}
	left    chan struct{}
	open    chan struct{}
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 100), left: make(chan struct{}, 100), open: make(chan struct{})}
}

// await returns once n signals have come on c.
func await(c chan struct{}, n int) {
	for range n {
		<-c
	}
}

func (h *countingHasher) pass(ctx context.Context) error {
	h.verifications.Add(1)
	if h.gate == nil {
		return nil
	}
	h.gate.entered <- struct{}{}
	select {
	case <-h.gate.open:
		return nil
	case <-ctx.Done():
		h.gate.left <- struct{}{}
		return ctx.Err()
	}
}

func (h *countingHasher) Verify(ctx context.Context, hash, pw string) (bool, error) {
	if err := h.pass(ctx); err != nil {
		return false, err
	}
	return h.PasswordHasher.Verify(ctx, hash, pw)
}

func (h *countingHasher) Check(ctx context.Context, hash, pw string) (bool, bool, error) {
	if err := h.pass(ctx); err != nil {
		return false, false, err
	}
	return h.PasswordHasher.Check(ctx, hash, pw)
}

func (h *countingHasher) VerifyDummy(ctx context.Context, pw string) error {
	if err := h.pass(ctx); err != nil {
		return err
	}
	return h.PasswordHasher.VerifyDummy(ctx, pw)
}

type throttledAPI struct {
	*api
	clock  *clock
	hasher *countingHasher
}

type throttleSetup struct {
	policy     account.ThrottlePolicy
	renewEvery time.Duration // LoginThrottle.RenewEvery
	proxies    []string      // ACCOUNT_TRUSTED_PROXIES
	hasher     *password.Hasher
	gate       *gate
	users      []string // in account acme; the password is "<name>-password"
}

// newThrottledAPI is the account service with a login throttle on a fresh
// database. Every exchange is validated against the OpenAPI document.
func newThrottledAPI(t *testing.T, setup throttleSetup) *throttledAPI {
	t.Helper()
	ctx := context.Background()
	store := mongostore.New(mongotest.New(t))
	if err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	hasher := setup.hasher
	if hasher == nil {
		hasher = cheapHasher(t)
	}
	counting := &countingHasher{PasswordHasher: hasher, gate: setup.gate}
	kit := newTokenKit(t, "ES256")
	proxies, err := web.ParseTrustedProxies(setup.proxies)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	srv := httptest.NewServer(accounthttp.NewHandler(kit.withAuthz(store, accounthttp.Deps{
		Sessions: kit.sessions(store, counting,
			&account.LoginThrottle{Store: store, Policy: setup.policy, Now: clk.Now, RenewEvery: setup.renewEvery, SettleTimeout: testSettleTimeout}),
		Definitions:    store,
		Verifier:       kit.verifier,
		Keys:           kit.keys,
		IssuerURL:      issuerURL,
		TrustedProxies: proxies,
	})))
	t.Cleanup(srv.Close)

	acc, err := store.CreateAccount(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range setup.users {
		hash, err := hasher.Hash(ctx, u+"-password")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.CreateUser(ctx, acc.ID, u, hash); err != nil {
			t.Fatal(err)
		}
	}
	return &throttledAPI{
		api:    &api{t: t, srv: srv, doc: openapitest.Load(t, accounthttp.OpenAPI), store: store, keys: kit.ring, verifier: kit.verifier},
		clock:  clk,
		hasher: counting,
	}
}

// loginVia posts a login, with an X-Forwarded-For header when xff is set.
func (a *throttledAPI) loginVia(xff, username, pw string) response {
	a.t.Helper()
	req, err := http.NewRequest("POST", a.srv.URL+"/login", bytes.NewReader([]byte(loginBody("acme", username, pw))))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, body := a.doc.Do(a.t, a.srv.Client(), req)
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

func (a *throttledAPI) loginStatus(username, pw string) int {
	a.t.Helper()
	return a.loginVia("", username, pw).status
}

// wantThrottled checks a 429 with its problem body and Retry-After.
func wantThrottled(t *testing.T, r response, retryAfter time.Duration) {
	t.Helper()
	r.problem(t, http.StatusTooManyRequests, "too_many_requests")
	if got, want := r.header.Get("Retry-After"), strconv.Itoa(int(retryAfter/time.Second)); got != want {
		t.Fatalf("Retry-After = %q, want %q", got, want)
	}
}

func (a *throttledAPI) state(key string) account.ThrottleState {
	a.t.Helper()
	st, err := a.store.LoginThrottleState(context.Background(), key)
	if err != nil {
		a.t.Fatal(err)
	}
	return st
}

var testPolicy = account.ThrottlePolicy{
	User: account.ThrottleLimit{MaxFailures: 3, Window: 15 * time.Minute, Lockout: 15 * time.Minute, MaxLockout: time.Hour},
	IP:   account.ThrottleLimit{MaxFailures: 10, Window: 15 * time.Minute, Lockout: 15 * time.Minute, MaxLockout: time.Hour},
}

func TestLoginThrottleLocksTheUserUntilTheLockoutEnds(t *testing.T) {
	t.Parallel()
	a := newThrottledAPI(t, throttleSetup{policy: testPolicy, users: []string{"alice", "bob"}})
	for range 3 {
		a.clock.Advance(time.Second)
		a.loginVia("", "alice", "wrong").problem(t, http.StatusUnauthorized, "invalid_credentials")
	}
	verified := a.hasher.verifications.Load()
	// Locked for 15 minutes from the third failure: the right password is
	// refused too, and no password is verified.
	wantThrottled(t, a.loginVia("", "alice", "alice-password"), 15*time.Minute)
	wantThrottled(t, a.loginVia("", "ALICE ", "wrong"), 15*time.Minute) // the same user, normalized
	a.clock.Advance(15*time.Minute - time.Second)
	wantThrottled(t, a.loginVia("", "alice", "alice-password"), time.Second)
	if n := a.hasher.verifications.Load() - verified; n != 0 {
		t.Fatalf("%d password verifications during the lockout, want 0", n)
	}
	// The lockout ends.
	a.clock.Advance(time.Second)
	if s := a.loginStatus("alice", "alice-password"); s != http.StatusOK {
		t.Fatalf("after the lockout: %d, want 200", s)
	}
	// A success forgets the lockout: the next one lasts 15 minutes again...
	for range 3 {
		a.loginVia("", "alice", "wrong").problem(t, http.StatusUnauthorized, "invalid_credentials")
	}
	wantThrottled(t, a.loginVia("", "alice", "alice-password"), 15*time.Minute)
	// ...while one that follows a lockout (within a day) lasts twice as long.
	a.clock.Advance(15 * time.Minute)
	for range 3 {
		a.loginVia("", "alice", "wrong").problem(t, http.StatusUnauthorized, "invalid_credentials")
	}
	wantThrottled(t, a.loginVia("", "alice", "alice-password"), 30*time.Minute)
	a.clock.Advance(30 * time.Minute)
	if s := a.loginStatus("alice", "alice-password"); s != http.StatusOK {
		t.Fatalf("after the second lockout: %d, want 200", s)
	}
}

func TestLoginThrottleSuccessResetsTheUserCounter(t *testing.T) {
	t.Parallel()
	a := newThrottledAPI(t, throttleSetup{policy: testPolicy, users: []string{"alice"}})
	for round := range 3 {
		for range 2 {
			if s := a.loginStatus("alice", "wrong"); s != http.StatusUnauthorized {
				t.Fatalf("round %d: wrong password: %d, want 401", round, s)
			}
		}
		// Without the reset, the third round's failures would lock.
		if s := a.loginStatus("alice", "alice-password"); s != http.StatusOK {
			t.Fatalf("round %d: right password: %d, want 200", round, s)
		}
		if st := a.state(account.UserThrottleKey("acme", "alice")); st != (account.ThrottleState{}) {
			t.Fatalf("round %d: user counter after a success: %+v, want none", round, st)
		}
	}
	// The address counts the failures only.
	if st := a.state(account.IPThrottleKey("127.0.0.1")); st.Failures != 6 {
		t.Fatalf("address counter %+v, want 6 failures", st)
	}
}

func TestLoginThrottleOfOneUserDoesNotLockOutAnother(t *testing.T) {
	t.Parallel()
	a := newThrottledAPI(t, throttleSetup{policy: testPolicy, users: []string{"alice", "bob"}})
	for range 3 {
		a.loginStatus("alice", "wrong")
	}
	wantThrottled(t, a.loginVia("", "alice", "alice-password"), 15*time.Minute)
	// Same address (its limit is higher), other user: unaffected.
	if s := a.loginStatus("bob", "wrong"); s != http.StatusUnauthorized {
		t.Fatalf("bob, wrong password: %d, want 401", s)
	}
	if s := a.loginStatus("bob", "bob-password"); s != http.StatusOK {
		t.Fatalf("bob, right password: %d, want 200", s)
	}
	// A user that does not exist is throttled the same way, so a 429
	// tells nothing about existence.
	for range 3 {
		a.loginVia("", "nobody", "wrong").problem(t, http.StatusUnauthorized, "invalid_credentials")
	}
	wantThrottled(t, a.loginVia("", "nobody", "wrong"), 15*time.Minute)
}

func TestLoginThrottleByAddressAcrossUsernames(t *testing.T) {
	t.Parallel()
	a := newThrottledAPI(t, throttleSetup{policy: testPolicy, users: []string{"bob"}})
	// One failure each for 10 usernames: no user limit is reached, the
	// address limit is.
	for i := range 10 {
		if s := a.loginStatus(fmt.Sprint("user", i), "wrong"); s != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d, want 401", i, s)
		}
	}
	wantThrottled(t, a.loginVia("", "bob", "bob-password"), 15*time.Minute)
	wantThrottled(t, a.loginVia("", "user42", "wrong"), 15*time.Minute)
	// Refused attempts count against neither key.
	if st := a.state(account.UserThrottleKey("acme", "user42")); st != (account.ThrottleState{}) {
		t.Fatalf("a refused attempt was counted for its user: %+v", st)
	}
	a.clock.Advance(15 * time.Minute)
	if s := a.loginStatus("bob", "bob-password"); s != http.StatusOK {
		t.Fatalf("after the lockout: %d, want 200", s)
	}
}

func TestLoginThrottleTrustedProxies(t *testing.T) {
	t.Parallel()
	policy := testPolicy
	policy.IP.MaxFailures = 3
	policy.User.MaxFailures = 100

	t.Run("ForwardedForFromAnUntrustedPeerIsIgnored", func(t *testing.T) {
		// Proxies are configured, but the test client (127.0.0.1) is not
		// one of them, and loopback is not trusted by default: every
		// request counts against 127.0.0.1, whatever it claims.
		a := newThrottledAPI(t, throttleSetup{policy: policy, proxies: []string{"10.0.0.0/8"}, users: []string{"bob"}})
		for i := range 3 {
			if s := a.loginVia(fmt.Sprint("203.0.113.", i+1), "bob", "wrong").status; s != http.StatusUnauthorized {
				t.Fatalf("failure %d: %d, want 401", i, s)
			}
		}
		wantThrottled(t, a.loginVia("203.0.113.99", "bob", "bob-password"), 15*time.Minute)
		if st := a.state(account.IPThrottleKey("127.0.0.1")); st.Failures != 3 {
			t.Fatalf("127.0.0.1: %+v, want 3 failures", st)
		}
		if st := a.state(account.IPThrottleKey("203.0.113.1")); st != (account.ThrottleState{}) {
			t.Fatalf("a forged address was counted: %+v", st)
		}
	})

	t.Run("ForwardedForFromATrustedPeerIsTheClient", func(t *testing.T) {
		a := newThrottledAPI(t, throttleSetup{policy: policy, proxies: []string{"127.0.0.1/32"}, users: []string{"bob"}})
		for i := range 3 {
			if s := a.loginVia("203.0.113.7", fmt.Sprint("user", i), "wrong").status; s != http.StatusUnauthorized {
				t.Fatalf("failure %d: %d, want 401", i, s)
			}
		}
		wantThrottled(t, a.loginVia("203.0.113.7", "bob", "bob-password"), 15*time.Minute)
		// A client cannot escape by prepending an address of its own: the
		// proxy appends the real one, and that is the one used.
		wantThrottled(t, a.loginVia("198.51.100.1, 203.0.113.7", "bob", "bob-password"), 15*time.Minute)
		// Other clients behind the same proxy, and the proxy itself, are
		// counted separately.
		if s := a.loginVia("203.0.113.8", "bob", "wrong").status; s != http.StatusUnauthorized {
			t.Fatalf("another client: %d, want 401", s)
		}
		if s := a.loginVia("203.0.113.8", "bob", "bob-password").status; s != http.StatusOK {
			t.Fatalf("another client, right password: %d, want 200", s)
		}
		if s := a.loginStatus("bob", "bob-password"); s != http.StatusOK {
			t.Fatalf("the proxy's own address: %d, want 200", s)
		}
		if st := a.state(account.IPThrottleKey("203.0.113.8")); st.Failures != 1 {
			t.Fatalf("203.0.113.8: %+v, want 1 failure", st)
		}
	})
}

// TestLoginBurstIsBoundedInMemory sends 40 simultaneous logins with the
// production argon2id parameters (19 MiB each) and 2 hashing slots: the
// process stays up, every answer is 200, 429 or 503 (hashing at capacity)
// with Retry-After, and the Go heap stays far below 40 × 19 MiB (760 MiB).
func TestLoginBurstIsBoundedInMemory(t *testing.T) {
	t.Parallel()
	const logins = 40
	hasher, err := password.New(password.Options{Concurrency: 2, QueueWait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// One user logs in 200 times at once, its limit raised so that every
	// login reaches the hasher (with the default of 5, no more than 5
	// attempts of one user are in flight at once: the others would wait in
	// the throttle, not at the hasher).
	// One user rather than many keeps the embedded test server, which
	// runs one command at a time and scans collections, out of the way.
	policy := account.DefaultThrottlePolicy
	policy.User.MaxFailures = 1000
	a := newThrottledAPI(t, throttleSetup{policy: policy, hasher: hasher, users: []string{"alice"}})

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseline := ms.HeapInuse
	var peak atomic.Uint64
	peak.Store(baseline)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()

	type exchange struct {
		req  *http.Request
		body []byte
		resp *http.Response
		got  []byte
		err  error
	}
	results := make([]exchange, logins)
	// No client timeout: 40 logins queue for two hashing slots, which
	// takes as long as the machine's load makes it; the test's -timeout
	// bounds a hang.
	client := &http.Client{}
	start := make(chan struct{})
	var wg sync.WaitGroup
	began := time.Now()
	for i := range logins {
		body := []byte(loginBody("acme", "alice", "alice-password"))
		req, err := http.NewRequest("POST", a.srv.URL+"/login", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		results[i] = exchange{req: req, body: body}
		wg.Go(func() {
			<-start
			x := &results[i]
			x.resp, x.err = client.Do(x.req)
			if x.err == nil {
				x.got, x.err = io.ReadAll(x.resp.Body)
				_ = x.resp.Body.Close()
			}
		})
	}
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	close(stop)
	<-sampled

	counts := map[int]int{}
	for i, x := range results {
		if x.err != nil {
			t.Fatalf("login %d: %v", i, x.err)
		}
		a.doc.Check(t, x.req, x.body, x.resp, x.got)
		s := x.resp.StatusCode
		counts[s]++
		switch s {
		case http.StatusOK:
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			if x.resp.Header.Get("Retry-After") == "" {
				t.Errorf("login %d: %d without Retry-After", i, s)
			}
		default:
			t.Errorf("login %d: status %d, want 200, 429 or 503; body %s", i, s, x.got)
		}
	}
	const mib = 1 << 20
	t.Logf("%d simultaneous logins in %v: %v (status: count); Go heap in use %d MiB before, peak %d MiB (unbounded hashing would need %d MiB)",
		logins, elapsed.Round(time.Millisecond), counts, baseline/mib, peak.Load()/mib, logins*19)
	if counts[http.StatusOK] == 0 || counts[http.StatusServiceUnavailable] == 0 {
		t.Errorf("want some logins through and some refused by the hashing limit, got %v", counts)
	}
	// No password was wrong: the address counted nothing.
	if st := a.state(account.IPThrottleKey("127.0.0.1")); st != (account.ThrottleState{}) {
		t.Errorf("address counter after the burst: %+v, want none", st)
	}
	// Two hashes of 19 MiB at a time, plus what the collector has not
	// reclaimed yet; 40 at once would be 760 MiB.
	if grew := (peak.Load() - baseline) / mib; grew > 400 {
		t.Errorf("Go heap grew by %d MiB during the burst, want well under 40 × 19 MiB (at most 400 MiB)", grew)
	}
}
