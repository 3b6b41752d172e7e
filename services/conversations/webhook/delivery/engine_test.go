package delivery_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/mongostore"
	"github.com/acme/platform/services/conversations/webhook"
	"github.com/acme/platform/services/conversations/webhook/delivery"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// holdingReceiver answers 204 to every delivery and counts, per endpoint path,
// the requests in flight at once and each webhook-id received.
type holdingReceiver struct {
	mu          sync.Mutex
	inFlight    map[string]int
	maxInFlight map[string]int
	maxTotal    int
	total       int
	received    map[string]int
	release     chan struct{} // each request waits for it to be closed
}

func (r *holdingReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	path := req.URL.Path
	r.mu.Lock()
	r.inFlight[path]++
	r.total++
	r.maxInFlight[path] = max(r.maxInFlight[path], r.inFlight[path])
	r.maxTotal = max(r.maxTotal, r.total)
	r.received[req.Header.Get("webhook-id")]++
	r.mu.Unlock()
	<-r.release
	r.mu.Lock()
	r.inFlight[path]--
	r.total--
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *holdingReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.received)
}

// newWebhooks returns a store on a fresh database and the webhooks' use
// cases on it, accepting http URLs.
func newWebhooks(t *testing.T) (*mongostore.Store, *webhook.Service) {
	t.Helper()
	store := mongostore.New(mongotest.New(t))
	if err := store.EnsureIndexes(t.Context()); err != nil {
		t.Fatal(err)
	}
	box, err := webhook.NewSecretBox([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	return store, &webhook.Service{Store: store, Box: box, URLs: webhook.URLPolicy{AllowHTTP: true}}
}

// TestEngineDeliversEachOnceWithinItsSlots runs the engine on the real
// store (make test-race runs this package under -race): deliveries of two
// endpoints, claimed in batches and recorded in batches, reach the
// receiver once each, never more at once than the engine's slots allow
// (in all and per endpoint), and each ends succeeded after one attempt.
func TestEngineDeliversEachOnceWithinItsSlots(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	store, wh := newWebhooks(t)
	rcv := &holdingReceiver{inFlight: map[string]int{}, maxInFlight: map[string]int{}, received: map[string]int{}, release: make(chan struct{})}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	client := conversations.Caller{AccountID: "acc_engine", ID: "cli_engine", Client: true}
	const perEndpoint, workers, each = 2, 3, 15
	var ds []webhook.Delivery
	var endpoints []string
	now := time.Now().UTC()
	for _, path := range []string{"/a", "/b"} {
		u := srv.URL + path
		e, _, err := wh.CreateEndpoint(ctx, client, webhook.NewEndpoint{URL: &u})
		if err != nil {
			t.Fatal(err)
		}
		endpoints = append(endpoints, e.ID)
		for range each {
			ds = append(ds, webhook.Delivery{
				ID: webhook.NewDeliveryID(), AccountID: client.AccountID, EndpointID: e.ID,
				EventID: conversations.NewEventID(), EventType: "webhook.test", EventTime: now, Payload: []byte(`{}`),
				State: webhook.DeliveryPending, NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now,
			})
		}
	}
	if err := store.InsertDeliveries(ctx, ds); err != nil {
		t.Fatal(err)
	}
	engine := &delivery.Engine{
		Webhooks: wh,
		Sender:   delivery.NewSender(delivery.NewDialer([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil), time.Minute, workers),
		// The engine claims when it starts and whenever a slot frees: its
		// poll is the fallback, and each poll reads the shared store.
		Poll: time.Minute, Workers: workers, PerEndpoint: perEndpoint,
	}
	wh.Wake = engine.Wake
	done := make(chan struct{})
	go func() {
		defer close(done)
		engine.Run(ctx)
	}()
	// The receiver holds the first requests until the engine has filled
	// its slots, so that the bounds are tested at their limit.
	for rcv.count() < workers {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a claim past the slots would arrive now
	close(rcv.release)
	deliveries := func() []webhook.Delivery {
		var out []webhook.Delivery
		for _, id := range endpoints {
			page, err := wh.ListDeliveries(context.Background(), client, id, 100, nil)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, page.Deliveries...)
		}
		return out
	}
	// Every event reaches the receiver, then every outcome is recorded.
	for rcv.count() < len(ds) {
		time.Sleep(5 * time.Millisecond)
	}
	for ended := false; !ended; time.Sleep(50 * time.Millisecond) {
		ended = true
		for _, d := range deliveries() {
			ended = ended && d.State != webhook.DeliveryPending
		}
	}
	cancel()
	<-done

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, d := range ds {
		if n := rcv.received[d.EventID]; n != 1 {
			t.Errorf("event %s received %d times, want once", d.EventID, n)
		}
	}
	for path, n := range rcv.maxInFlight {
		if n > perEndpoint {
			t.Errorf("%d requests at once to %s, at most %d allowed", n, path, perEndpoint)
		}
	}
	if rcv.maxTotal > workers {
		t.Errorf("%d requests at once, at most %d allowed", rcv.maxTotal, workers)
	}
	got := deliveries()
	if len(got) != len(ds) {
		t.Errorf("%d deliveries, want %d", len(got), len(ds))
	}
	for _, d := range got {
		if d.State != webhook.DeliverySucceeded || d.Attempts != 1 || d.ResponseStatus == nil || *d.ResponseStatus != http.StatusNoContent {
			t.Errorf("delivery %s: %s after %d attempts (status %v)", d.ID, d.State, d.Attempts, d.ResponseStatus)
		}
	}
}

// TestRetryKeepsItsSchedule: an attempt whose 200 never finishes its body
// fails, and its retry is made when the schedule says, not at the
// engine's next poll (ten minutes away here): the engine wakes for the
// retries it recorded. The second attempt then succeeds.
func TestRetryKeepsItsSchedule(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const retry, timeout, poll = time.Second, 300 * time.Millisecond, 10 * time.Minute
	_, wh := newWebhooks(t)
	wh.RetrySchedule = []time.Duration{retry}
	var mu sync.Mutex
	var arrivals []time.Time
	stop := make(chan struct{})
	defer close(stop)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		first := len(arrivals) == 1
		mu.Unlock()
		if !first {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		// 200 and its headers, then a body that never ends in time.
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer srv.Close()
	client := conversations.Caller{AccountID: "acc_retry", ID: "cli_retry", Client: true}
	u := srv.URL + "/hook"
	e, _, err := wh.CreateEndpoint(ctx, client, webhook.NewEndpoint{URL: &u})
	if err != nil {
		t.Fatal(err)
	}
	engine := &delivery.Engine{
		Webhooks: wh,
		Sender:   delivery.NewSender(delivery.NewDialer([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil), timeout, 0),
		Poll:     poll,
	}
	wh.Wake = engine.Wake
	runEngine(t, ctx, cancel, engine)
	if _, err := wh.SendTest(ctx, client, e.ID); err != nil {
		t.Fatal(err)
	}

	// The due time of the retry, when the test sees it before the claim
	// (which moves it to the lease's end), for the log.
	var due *time.Time
	deadline := time.Now().Add(time.Minute) // far below the poll
	var d webhook.Delivery
	for {
		page, err := wh.ListDeliveries(ctx, client, e.ID, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Deliveries) == 1 {
			d = page.Deliveries[0]
			if d.Attempts == 1 && d.State == webhook.DeliveryPending && due == nil && d.Claim == "" {
				due = d.NextAttemptAt
			}
			if d.State != webhook.DeliveryPending {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no retry within a minute: %s after %d attempts, next at %v (the engine polls every %s)", d.State, d.Attempts, d.NextAttemptAt, poll)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if d.State != webhook.DeliverySucceeded || d.Attempts != 2 || len(arrivals) != 2 ||
		d.ResponseStatus == nil || *d.ResponseStatus != http.StatusNoContent {
		t.Fatalf("delivery %s after %d attempts (status %v, %d requests), want succeeded at the second", d.State, d.Attempts, d.ResponseStatus, len(arrivals))
	}
	// The retry cannot come early: the first attempt ended after its
	// timeout, and the retry was due at least 80 % of the schedule later.
	gap := arrivals[1].Sub(arrivals[0])
	if min := timeout + retry*8/10; gap < min {
		t.Fatalf("retry after %s, before the schedule allows (%s)", gap, min)
	}
	if due != nil {
		t.Logf("retry %s after the first attempt, %s after it was due", gap.Round(time.Millisecond), arrivals[1].Sub(*due).Round(time.Millisecond))
	} else {
		t.Logf("retry %s after the first attempt", gap.Round(time.Millisecond))
	}
}

// TestFanOutFollowsTheRelay: with polls an hour apart, the events a
// replica's relay orders reach its endpoints because the relay tells the
// engine (Ordered); events ordered by a replica that died before its
// fan-out reach them through the sweep of the replica that takes its
// partitions over (SweepSoon), the sweep looking only at the accounts
// this replica holds.
func TestFanOutFollowsTheRelay(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	store, wh := newWebhooks(t)
	wh.Events = store
	var mu sync.Mutex
	got := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("webhook-id")] = true
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	const account = "acc_fanout"
	var held sync.Map // the account slots this replica's relay orders
	engine := &delivery.Engine{
		Webhooks: wh,
		Sender:   delivery.NewSender(delivery.NewDialer([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil), 5*time.Second, 0),
		Poll:     time.Hour,
		Slots: func() []int {
			slots := []int{}
			held.Range(func(k, _ any) bool { slots = append(slots, k.(int)); return true })
			return slots
		},
	}
	wh.Wake = engine.Wake
	client := conversations.Caller{AccountID: account, ID: "cli_fanout", Client: true}
	u := srv.URL + "/hook"
	e, _, err := wh.CreateEndpoint(ctx, client, webhook.NewEndpoint{URL: &u})
	if err != nil {
		t.Fatal(err)
	}
	runEngine(t, ctx, cancel, engine)
	svc := &conversations.Service{Store: store}
	user := conversations.Caller{AccountID: account, ID: "usr_9f86d081884c7d659a2feaa0"}
	order := func(relay *conversations.Relay) {
		t.Helper()
		if _, err := svc.CreateConversation(ctx, user, conversations.Conversation{Participants: []string{user.ID}, Status: conversations.StatusOpen}); err != nil {
			t.Fatal(err)
		}
		if _, err := relay.RelayOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	delivered := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute) // far below the poll
		for {
			page, err := wh.ListDeliveries(ctx, client, e.ID, 10, nil)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, d := range page.Deliveries {
				mu.Lock()
				if d.State == webhook.DeliverySucceeded && got[d.EventID] {
					n++
				}
				mu.Unlock()
			}
			if n == want && len(page.Deliveries) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d deliveries succeeded within a minute (%d recorded)", what, n, want, len(page.Deliveries))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	order(&conversations.Relay{Store: store, Ordered: engine.Ordered})
	delivered(1, "ordered by this replica's relay")
	// Another replica's relay ordered this event and died before fanning
	// it out; this replica then takes the account's partition.
	order(&conversations.Relay{Store: store})
	held.Store(conversations.PendingSlot(account), true)
	engine.SweepSoon()
	delivered(2, "left by a replica that died")
}

// runEngine runs engine until the test ends, then stops it and waits for
// it (cancel ends ctx).
func runEngine(t *testing.T, ctx context.Context, cancel context.CancelFunc, engine *delivery.Engine) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		engine.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
