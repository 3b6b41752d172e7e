package delivery

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook"
)

// DefaultWorkers is an Engine's bound on requests in flight when it sets
// none.
const DefaultWorkers = 64

// Engine delivers webhooks from one replica. It fans out the accounts
// whose events this replica's relay ordered (Ordered: their new events
// become deliveries), sweeping now and then for what a replica that
// died left, and claims due deliveries from MongoDB with leases, so that
// a crashed replica's claims fall due again when their lease ends. Each
// endpoint has at most PerEndpoint requests in flight on this replica,
// and the replica at most Workers, so an endpoint that hangs takes only
// its own slots.
type Engine struct {
	Webhooks *webhook.Service
	Sender   *Sender
	Logger   *slog.Logger
	// Poll is how often the engine looks for due deliveries when not
	// woken (by a delivery recorded here, a slot that frees, or a retry
	// this replica recorded falling due), taking those due for a Poll at
	// least; polls that find nothing space out up to idlePolls
	// intervals.
	Poll time.Duration
	// Sweep is how often the fan-out sweeps the accounts of Slots for
	// events not fanned out (0: every sweepPolls × Poll).
	Sweep time.Duration
	// Slots returns the account slots (conversations.PendingSlot) whose
	// events this replica's relay orders (nil: every account, one
	// replica); the sweep looks at those only.
	Slots func() []int
	// Gauges reports whether this replica reads the oldest pending
	// delivery for Metrics (nil: always): one replica suffices, since
	// every replica would read the same; the others show 0.
	Gauges func() bool
	// Lease is how long a claim holds: longer than an attempt's timeout.
	Lease time.Duration
	// Workers bounds the requests in flight on this replica, PerEndpoint
	// those to one endpoint.
	Workers     int
	PerEndpoint int
	Metrics     *Metrics

	wake chan struct{}
	once sync.Once
	due  dueTimes

	fanMu      sync.Mutex
	fanPending map[string]bool // accounts to fan out
	fanSweep   bool            // sweep at the next pass
	fanWake    chan struct{}
}

// idlePolls bounds the wait between polls for due deliveries that find
// nothing, in poll intervals: the deliveries a replica records and the
// retries it schedules wake it, so the poll only finds what another
// replica left (its retries, its claims after a crash).
const idlePolls = 16

// sweepPolls is the fan-out's sweep interval in poll intervals, when
// Sweep is not set. The sweep finds what no pass fanned out: a
// replica's partitions taken over (SweepSoon) aside, only the events
// ordered while an endpoint created on another replica was being
// stored, with none of its account's after them.
const sweepPolls = 60

// fanoutSpacing is the least time between two fan-out passes: the events
// ordered meanwhile are fanned out together (one read of the log an
// account, one write of the deliveries and one of the cursors a pass).
const fanoutSpacing = 100 * time.Millisecond

// maxDueTimes bounds the due times an engine keeps; beyond them a retry
// is found by the poll.
const maxDueTimes = 10000

// dueTimes are the times retries this replica recorded fall due, earliest
// first, so that the engine claims when one is due rather than at its
// next poll: the retry schedule is kept without a read per delivery.
type dueTimes struct {
	mu   sync.Mutex
	heap timeHeap
}

// add remembers t.
func (d *dueTimes) add(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.heap.Len() < maxDueTimes {
		heap.Push(&d.heap, t)
	}
}

// next forgets the times before claimed (a claim that started at claimed
// saw them due) and returns the earliest left.
func (d *dueTimes) next(claimed time.Time) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.heap.Len() > 0 && d.heap[0].Before(claimed) {
		heap.Pop(&d.heap)
	}
	if d.heap.Len() == 0 {
		return time.Time{}, false
	}
	return d.heap[0], true
}

// timeHeap is a container/heap of times, earliest first.
type timeHeap []time.Time

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *timeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

func (e *Engine) init() {
	e.once.Do(func() {
		e.wake = make(chan struct{}, 1)
		e.fanWake = make(chan struct{}, 1)
		e.fanPending = map[string]bool{}
		if e.Logger == nil {
			e.Logger = slog.New(slog.DiscardHandler)
		}
		if e.Poll <= 0 {
			e.Poll = time.Second
		}
		if e.Sweep <= 0 {
			e.Sweep = sweepPolls * e.Poll
		}
		if e.Workers <= 0 {
			e.Workers = DefaultWorkers
		}
		if e.PerEndpoint <= 0 {
			e.PerEndpoint = 4
		}
		if e.Lease <= 0 {
			e.Lease = 2*e.Sender.timeout + 15*time.Second
		}
	})
}

// Wake makes the engine look for due deliveries now (a delivery was just
// recorded on this replica).
func (e *Engine) Wake() {
	e.init()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Ordered tells the engine that this replica's relay ordered events of
// the accounts: it fans them out at its next pass.
func (e *Engine) Ordered(accountIDs []string) {
	e.init()
	e.fanMu.Lock()
	for _, a := range accountIDs {
		e.fanPending[a] = true
	}
	e.fanMu.Unlock()
	e.signalFanOut()
}

// SweepSoon makes the next fan-out pass a sweep (this replica took over
// relay partitions, whose accounts' events a replica that died may have
// ordered without fanning them out).
func (e *Engine) SweepSoon() {
	e.init()
	e.fanMu.Lock()
	e.fanSweep = true
	e.fanMu.Unlock()
	e.signalFanOut()
}

func (e *Engine) signalFanOut() {
	select {
	case e.fanWake <- struct{}{}:
	default:
	}
}

// newClaim is a token naming one claim of this replica.
func newClaim() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Run works until ctx ends, then waits for the attempts in flight (which
// end with ctx: their outcome is not recorded, and their lease lets
// another replica take them).
func (e *Engine) Run(ctx context.Context) {
	e.init()
	var wg sync.WaitGroup
	wg.Go(func() { e.fanOutLoop(ctx) })
	wg.Go(func() { e.gaugeLoop(ctx) })
	e.deliverLoop(ctx, &wg)
	wg.Wait()
}

// fanOutLoop turns new events into deliveries: when woken (Ordered,
// SweepSoon) or when a sweep is due, at most once every fanoutSpacing.
// Accounts whose pass failed or that have more events wait for the next
// pass.
func (e *Engine) fanOutLoop(ctx context.Context) {
	sweep := time.NewTimer(0) // at start: what waited while no replica ran
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.fanWake:
		case <-sweep.C:
			e.fanMu.Lock()
			e.fanSweep = true
			e.fanMu.Unlock()
		}
		began := time.Now()
		e.fanMu.Lock()
		accounts := slices.Collect(maps.Keys(e.fanPending))
		clear(e.fanPending)
		sweeping := e.fanSweep
		e.fanSweep = false
		e.fanMu.Unlock()
		var more []string
		var err error
		if sweeping {
			// The sweep covers the accounts ordered meanwhile that have
			// endpoints, when this replica holds them, and the rest have
			// none to fan out to, but a partition may have moved since
			// the relay ordered them: those are fanned out as well.
			var slots []int
			if e.Slots != nil {
				slots = e.Slots()
			}
			more, err = e.Webhooks.FanOutSweep(ctx, slots)
			if err == nil && slots != nil {
				accounts = slices.DeleteFunc(accounts, func(a string) bool { return slices.Contains(slots, conversations.PendingSlot(a)) })
			} else if err == nil {
				accounts = nil
			}
			sweep.Reset(e.Sweep)
		}
		if err == nil && len(accounts) > 0 {
			var m []string
			m, err = e.Webhooks.FanOutAccounts(ctx, accounts)
			more = append(more, m...)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.Logger.WarnContext(ctx, "webhook fan-out", "error", err.Error())
			more = append(more, accounts...) // again at the next pass
			if sweeping {
				e.SweepSoon()
			}
		}
		if len(more) > 0 {
			e.Ordered(more)
		}
		wait := fanoutSpacing - time.Since(began)
		if err != nil {
			wait = max(wait, min(e.Poll, time.Second)) // the store is failing
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// gaugeLoop keeps the age of the oldest pending delivery current.
func (e *Engine) gaugeLoop(ctx context.Context) {
	if e.Metrics == nil {
		return
	}
	every := max(e.Poll, 5*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if e.Gauges == nil || e.Gauges() {
			oldest, err := e.Webhooks.OldestPending(ctx)
			if err == nil {
				age := 0.0
				if oldest != nil {
					age = max(time.Since(*oldest).Seconds(), 0)
				}
				e.Metrics.oldestPending.Set(age)
			}
		} else {
			e.Metrics.oldestPending.Set(0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// finished is an attempt whose request has ended, waiting to be recorded.
type finished struct {
	attempt webhook.Attempt
	result  webhook.AttemptResult
}

// maxRecordBatch bounds the outcomes one write records.
const maxRecordBatch = 256

// gatherFor bounds how long the recorder, once an attempt has ended,
// waits for the others in flight to end too, so that one write records a
// claim's attempts together and their slots free together: the next claim
// then fills them in one batch.
const gatherFor = 5 * time.Millisecond

// deliverLoop claims due deliveries in batches while slots are free and
// sends each in a goroutine of its own; one recorder writes the outcomes
// of the attempts that ended meanwhile together. A slot is free again
// once its outcome is recorded, so the claims of a replica never exceed
// its slots.
func (e *Engine) deliverLoop(ctx context.Context, wg *sync.WaitGroup) {
	var mu sync.Mutex
	inFlight := map[string]int{} // endpoint id: attempts in flight
	total := 0
	freed := make(chan struct{}, 1)
	// release frees the slots of the endpoints, all before the claim
	// that the freed slots wake.
	release := func(endpoints ...string) {
		mu.Lock()
		for _, endpoint := range endpoints {
			if inFlight[endpoint]--; inFlight[endpoint] == 0 {
				delete(inFlight, endpoint)
			}
			total--
		}
		mu.Unlock()
		select {
		case freed <- struct{}{}:
		default:
		}
	}
	// Every attempt sends once at most, and at most Workers are in
	// flight: sending never blocks.
	ended := make(chan finished, e.Workers)
	claimed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return total
	}
	wg.Go(func() { e.recordLoop(ctx, ended, release, claimed) })
	slots := func() webhook.Slots {
		mu.Lock()
		defer mu.Unlock()
		return webhook.Slots{Free: e.Workers - total, PerEndpoint: e.PerEndpoint, InFlight: maps.Clone(inFlight)}
	}
	// poll fires when the engine looks for due deliveries unasked: every
	// Poll, spaced out to idlePolls × Poll while those polls find none.
	idle := e.Poll
	poll := time.NewTimer(idle)
	defer poll.Stop()
	// due fires when the earliest retry this replica recorded is due.
	due := time.NewTimer(e.Poll)
	defer due.Stop()
	polled := false
	for {
		// A claim sees due what is due a millisecond before it starts
		// (the store keeps milliseconds).
		claimed := time.Now().Add(-time.Millisecond)
		found := false
		for ctx.Err() == nil {
			room := slots()
			if room.Free <= 0 {
				break
			}
			// A poll leaves the deliveries due for less than a poll
			// interval to the replica that recorded them, which claims
			// them when it records them or when a slot frees: otherwise
			// every replica's poll would race it for them, each a claim
			// of a few, and never back off.
			overdue := time.Duration(0)
			if polled {
				overdue = e.Poll
			}
			attempts, more, err := e.Webhooks.ClaimAttempts(ctx, newClaim(), e.Lease, overdue, room)
			if err != nil && ctx.Err() == nil {
				e.Logger.WarnContext(ctx, "claim webhook deliveries", "error", err.Error())
			}
			found = found || len(attempts) > 0 || more
			for _, a := range attempts {
				endpoint := a.Delivery.EndpointID
				mu.Lock()
				inFlight[endpoint]++
				total++
				mu.Unlock()
				wg.Go(func() {
					var r webhook.AttemptResult
					if a.Refusal == "" {
						r = e.Sender.Send(ctx, a)
					}
					if ctx.Err() != nil {
						// Stopping: the lease hands the delivery to another
						// replica.
						release(endpoint)
						return
					}
					ended <- finished{a, r}
				})
			}
			if err != nil || !more {
				break
			}
		}
		if next, ok := e.due.next(claimed); ok {
			due.Reset(max(time.Until(next), 0))
		} else {
			due.Stop()
		}
		switch {
		case found:
			idle = e.Poll
		case polled:
			idle = min(2*idle, idlePolls*e.Poll)
		}
		if polled || found {
			poll.Reset(idle)
		}
		polled = false
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
		case <-freed:
		case <-poll.C:
			polled = true
		case <-due.C:
		}
	}
}

// recordLoop records the outcomes of ended attempts, all that end while
// the previous write is under way or within gatherFor of the first (while
// others of the claimed, counted by claimed, are still in flight) in one
// write, and frees their slots.
func (e *Engine) recordLoop(ctx context.Context, ended <-chan finished, release func(endpoints ...string), claimed func() int) {
	gather := time.NewTimer(gatherFor)
	defer gather.Stop()
	for {
		var batch []finished
		select {
		case <-ctx.Done():
			return
		case f := <-ended:
			batch = append(batch, f)
		}
		gather.Reset(gatherFor)
	collect:
		for len(batch) < maxRecordBatch {
			select {
			case f := <-ended:
				batch = append(batch, f)
				continue
			default:
			}
			if len(batch) >= claimed() {
				break
			}
			select {
			case f := <-ended:
				batch = append(batch, f)
			case <-gather.C:
				break collect
			case <-ctx.Done():
				break collect
			}
		}
		e.record(ctx, batch)
		endpoints := make([]string, len(batch))
		for i, f := range batch {
			endpoints[i] = f.attempt.Delivery.EndpointID
		}
		release(endpoints...)
	}
}

// record writes a batch of outcomes, then logs and counts each attempt.
func (e *Engine) record(ctx context.Context, batch []finished) {
	as := make([]webhook.Attempt, len(batch))
	rs := make([]webhook.AttemptResult, len(batch))
	for i, f := range batch {
		as[i], rs[i] = f.attempt, f.result
	}
	outs, err := e.Webhooks.FinishAttempts(ctx, as, rs)
	if err != nil {
		if ctx.Err() == nil {
			e.Logger.WarnContext(ctx, "record webhook attempts", "attempts", len(batch), "error", err.Error())
		}
		return
	}
	for i, out := range outs {
		a, r := as[i], rs[i]
		if !out.Recorded {
			e.Logger.InfoContext(ctx, "webhook attempt outlived its lease; another replica holds the delivery", "delivery", a.Delivery.ID)
		} else if out.State == webhook.DeliveryPending && out.NextAttemptAt != nil {
			// Its slot frees after this; the claim that follows sets
			// the timer of the earliest retry.
			e.due.add(*out.NextAttemptAt)
		}
		if out.Disabled {
			e.Logger.WarnContext(ctx, "webhook endpoint disabled", "endpoint", a.Delivery.EndpointID)
			if e.Metrics != nil {
				e.Metrics.disabled.Inc()
			}
		}
		if e.Metrics == nil || a.Refusal != "" {
			continue
		}
		outcome := "failed"
		if r.Succeeded() {
			outcome = "succeeded"
			e.Metrics.latency.Observe(max(time.Since(a.Delivery.EventTime).Seconds(), 0))
		}
		e.Metrics.attempts.WithLabelValues(outcome, statusClass(r.Status)).Inc()
	}
}

func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "none"
	}
	return strconv.Itoa(status/100) + "xx"
}

// Metrics are the engine's series.
type Metrics struct {
	attempts      *prometheus.CounterVec
	latency       prometheus.Histogram
	oldestPending prometheus.Gauge
	disabled      prometheus.Counter
}

// NewMetrics registers the engine's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "conversations_webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome (succeeded, failed) and response status class (2xx..5xx, none when no response).",
		}, []string{"outcome", "status_class"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "conversations_webhook_delivery_latency_seconds",
			Help:    "Time from an event's change to the 2xx of its delivery.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200},
		}),
		oldestPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "conversations_webhook_oldest_pending_seconds",
			Help: "How long the pending webhook delivery due longest ago has waited past its due time (0 when none waits), as last read by the replica holding relay partition 0 (0 on the others).",
		}),
		disabled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "conversations_webhook_endpoints_disabled_total",
			Help: "Webhook endpoints the service disabled (410 Gone, or failing for the configured time).",
		}),
	}
	// Every series a rule or panel selects exists from the start.
	for _, o := range []string{"succeeded", "failed"} {
		for _, c := range []string{"2xx", "3xx", "4xx", "5xx", "none"} {
			m.attempts.WithLabelValues(o, c)
		}
	}
	reg.MustRegister(m.attempts, m.latency, m.oldestPending, m.disabled)
	return m
}
