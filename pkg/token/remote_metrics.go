package token

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Fetch results, the values of the result label of jwks_refreshes_total.
const (
	fetchSuccess = "success"
	fetchFailure = "failure"
)

// remoteMetrics are a RemoteKeySet's metrics, for alerts on a verifier
// whose keys go stale: the JWKS endpoint failing, and how long ago a key
// set last arrived. Methods on a nil *remoteMetrics do nothing.
type remoteMetrics struct {
	refreshes   *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	keys        prometheus.Gauge
}

func newRemoteMetrics() *remoteMetrics {
	m := &remoteMetrics{
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jwks_refreshes_total",
			Help: "Fetches of the issuer's JWKS (background refreshes, retries of the first fetch, refetches for an unknown kid) by result; a failure (unreachable, not 200, unparsable, no keys) keeps the last good key set.",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jwks_last_refresh_success_timestamp_seconds",
			Help: "Unix time of the last fetch of the JWKS that brought a usable key set; 0 before the first. time() minus this is the age of the keys tokens are verified with.",
		}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jwks_keys",
			Help: "Keys in the key set tokens are verified with; 0 until the first fetch succeeds (every request is then a 503).",
		}),
	}
	// Both results exist from the start, so that a rate of failures is
	// 0 rather than absent before the first one.
	m.refreshes.WithLabelValues(fetchSuccess)
	m.refreshes.WithLabelValues(fetchFailure)
	return m
}

func (m *remoteMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.refreshes, m.lastSuccess, m.keys} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register JWKS metrics (one RemoteKeySet per registry): %w", err)
		}
	}
	return nil
}

func (m *remoteMetrics) fetchSucceeded(at time.Time, keys int) {
	if m == nil {
		return
	}
	m.refreshes.WithLabelValues(fetchSuccess).Inc()
	m.lastSuccess.Set(float64(at.UnixNano()) / 1e9)
	m.keys.Set(float64(keys))
}

func (m *remoteMetrics) fetchFailed() {
	if m == nil {
		return
	}
	m.refreshes.WithLabelValues(fetchFailure).Inc()
}
