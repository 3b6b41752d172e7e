package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/services/conversations"
)

// Engine delivers webhooks from one replica: it claims fan-out work (an
// endpoint's new events become deliveries) and due deliveries from
// MongoDB with leases, so that every replica takes part and a crashed
// replica's claims fall due again when their lease ends. Each endpoint
// has at most PerEndpoint requests in flight on this replica, and the
// replica at most Workers, so an endpoint that hangs takes only its own
// slots.
type Engine struct {
	Webhooks *conversations.Webhooks
	Sender   *Sender
	Logger   *slog.Logger
	// Poll is how often the engine looks for work when not woken.
	Poll time.Duration
	// Lease is how long a claim holds: longer than an attempt's timeout.
	Lease time.Duration
	// Workers bounds the requests in flight on this replica, PerEndpoint
	// those to one endpoint.
	Workers     int
	PerEndpoint int
	Metrics     *Metrics

	wake chan struct{}
	once sync.Once
}

func (e *Engine) init() {
	e.once.Do(func() {
		e.wake = make(chan struct{}, 1)
		if e.Logger == nil {
			e.Logger = slog.New(slog.DiscardHandler)
		}
		if e.Poll <= 0 {
			e.Poll = time.Second
		}
		if e.Workers <= 0 {
			e.Workers = 64
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

// fanOutLoop turns new events into deliveries: it takes endpoints whose
// turn has come until none is left, then waits for the next poll.
func (e *Engine) fanOutLoop(ctx context.Context) {
	t := time.NewTicker(e.Poll)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			worked, err := e.Webhooks.FanOut(ctx, newClaim(), e.Poll, e.Lease)
			if err != nil && ctx.Err() == nil {
				e.Logger.WarnContext(ctx, "webhook fan-out", "error", err.Error())
				break
			}
			if !worked {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
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
		oldest, err := e.Webhooks.OldestPending(ctx)
		if err == nil {
			age := 0.0
			if oldest != nil {
				age = max(time.Since(*oldest).Seconds(), 0)
			}
			e.Metrics.oldestPending.Set(age)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// deliverLoop claims due deliveries while slots are free, each attempt
// in a goroutine of its own.
func (e *Engine) deliverLoop(ctx context.Context, wg *sync.WaitGroup) {
	var mu sync.Mutex
	inFlight := map[string]int{} // endpoint id: attempts in flight
	total := 0
	done := make(chan struct{}, 1)
	busy := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for id, n := range inFlight {
			if n >= e.PerEndpoint {
				out = append(out, id)
			}
		}
		return out
	}
	t := time.NewTicker(e.Poll)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			mu.Lock()
			full := total >= e.Workers
			mu.Unlock()
			if full {
				break
			}
			claim := newClaim()
			a, ok, err := e.Webhooks.ClaimAttempt(ctx, claim, e.Lease, busy())
			if err != nil && ctx.Err() == nil {
				e.Logger.WarnContext(ctx, "claim webhook delivery", "error", err.Error())
			}
			if !ok || err != nil {
				break
			}
			endpoint := a.Delivery.EndpointID
			mu.Lock()
			inFlight[endpoint]++
			total++
			mu.Unlock()
			wg.Go(func() {
				e.attempt(ctx, a)
				mu.Lock()
				if inFlight[endpoint]--; inFlight[endpoint] == 0 {
					delete(inFlight, endpoint)
				}
				total--
				mu.Unlock()
				select {
				case done <- struct{}{}:
				default:
				}
			})
		}
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
		case <-done:
		case <-t.C:
		}
	}
}

// attempt sends one claimed delivery and records its outcome.
func (e *Engine) attempt(ctx context.Context, a conversations.Attempt) {
	var r conversations.AttemptResult
	if a.Refusal == "" {
		r = e.Sender.Send(ctx, a)
	}
	if ctx.Err() != nil {
		return // stopping: the lease hands the delivery to another replica
	}
	out, err := e.Webhooks.FinishAttempt(ctx, a, r)
	if err != nil {
		e.Logger.WarnContext(ctx, "record webhook attempt", "delivery", a.Delivery.ID, "error", err.Error())
		return
	}
	if !out.Recorded {
		e.Logger.InfoContext(ctx, "webhook attempt outlived its lease; another replica holds the delivery", "delivery", a.Delivery.ID)
		return
	}
	if out.Disabled {
		e.Logger.WarnContext(ctx, "webhook endpoint disabled", "endpoint", a.Delivery.EndpointID)
		if e.Metrics != nil {
			e.Metrics.disabled.Inc()
		}
	}
	if e.Metrics == nil || a.Refusal != "" {
		return
	}
	outcome := "failed"
	if r.Succeeded() {
		outcome = "succeeded"
		e.Metrics.latency.Observe(max(time.Since(a.Delivery.EventTime).Seconds(), 0))
	}
	e.Metrics.attempts.WithLabelValues(outcome, statusClass(r.Status)).Inc()
}

func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "none"
	}
	return strconv.Itoa(status/100) + "xx"
}

// Metrics are the engine's series (contract 11.3, issue 23).
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
			Help: "How long the pending webhook delivery due longest ago has waited past its due time (0 when none waits), as this replica last read it.",
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
