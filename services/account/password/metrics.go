package password

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics show how close hashing is to its concurrency limit: slots in use
// against slots, calls queued for one and how long they waited, and calls
// refused with ErrBusy (each a 503 to a login). Methods on a nil *metrics
// do nothing.
type metrics struct {
	waiting    prometheus.Gauge
	wait       prometheus.Histogram
	rejections prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, slots chan struct{}) (*metrics, error) {
	m := &metrics{
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "account_password_hash_waiting",
			Help: "Password hashes queued for a hashing slot right now.",
		}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "account_password_hash_queue_wait_seconds",
			Help: "How long each password hash waited for a hashing slot (0 when one was free).",
			// Up to the default queue wait (2 s), after which ErrBusy.
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2},
		}),
		rejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "account_password_hash_rejections_total",
			Help: "Password hashes refused because no hashing slot freed up within the queue wait; each is a 503 to a login.",
		}),
	}
	collectors := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "account_password_hash_slots",
			Help: "Password hashes that may run at once (ACCOUNT_HASH_CONCURRENCY).",
		}, func() float64 { return float64(cap(slots)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "account_password_hash_slots_in_use",
			Help: "Password hashes running right now.",
		}, func() float64 { return float64(len(slots)) }),
		m.waiting, m.wait, m.rejections,
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register password hashing metrics (one Hasher per registry): %w", err)
		}
	}
	return m, nil
}

// slotTaken records a call that found a free slot at once.
func (m *metrics) slotTaken(waited time.Duration) {
	if m == nil {
		return
	}
	m.wait.Observe(waited.Seconds())
}

// queued records a call that has to wait for a slot; dequeued, how that
// wait ended.
func (m *metrics) queued() {
	if m == nil {
		return
	}
	m.waiting.Inc()
}

func (m *metrics) dequeued(waited time.Duration, err error) {
	if m == nil {
		return
	}
	m.waiting.Dec()
	switch {
	case err == nil:
		m.wait.Observe(waited.Seconds())
	case errors.Is(err, ErrBusy):
		m.rejections.Inc()
	}
	// A caller that gave up (its context ended) is neither.
}
