package token_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/token"
)

// The metrics of a RemoteKeySet follow its fetches: a success moves the
// time of the last success and sets the key count; a failure (an error
// status, a set without keys) counts as one and leaves both alone.
func TestRemoteKeySetMetrics(t *testing.T) {
	t.Parallel()
	first := newKeyring(t, token.AlgRS256)
	server := newJWKSServer(t, first)
	// Background refreshes wait an hour (max-age), so that after the first
	// fetch only the refetches below fetch.
	server.header.Set("Cache-Control", "max-age=3600")
	reg := prometheus.NewRegistry()
	before := time.Now()
	r := newRemote(t, server, token.RemoteOptions{MinRefreshInterval: time.Millisecond, RefreshInterval: time.Hour, Metrics: reg})
	r.waitReady(t)
	// The fetch is recorded in the metrics just after its keys are in use:
	// wait until it shows, then it happened before now.
	var m jwksMetrics
	eventually(t, 5*time.Second, "the first fetch in the metrics", func() bool {
		m = readJWKSMetrics(t, reg)
		return m.successes >= 1
	})
	after := time.Now()
	if m.successes < 1 || m.failures != 0 || m.keys != 1 {
		t.Fatalf("after the first fetch: %+v, want a success, no failure, 1 key", m)
	}
	if m.lastSuccess.Before(before.Add(-time.Millisecond)) || m.lastSuccess.After(after) {
		t.Errorf("last success at %v, want between %v and %v", m.lastSuccess, before, after)
	}

	// The issuer publishes a second key.
	server.serve(http.StatusOK, newKeyring(t, token.AlgES256, first).JWKS())
	r.refetch(t)
	got := readJWKSMetrics(t, reg)
	if got.successes != m.successes+1 || got.failures != 0 || got.keys != 2 || !got.lastSuccess.After(m.lastSuccess) {
		t.Fatalf("after a fetch of two keys: %+v, was %+v", got, m)
	}
	m = got

	for _, failure := range []struct {
		status int
		body   string
	}{
		{http.StatusBadGateway, `{"error":"upstream"}`},
		{http.StatusOK, `{"keys":[]}`},
	} {
		server.serve(failure.status, []byte(failure.body))
		r.refetch(t)
	}
	got = readJWKSMetrics(t, reg)
	if got.successes != m.successes || got.failures != 2 || got.keys != 2 || !got.lastSuccess.Equal(m.lastSuccess) {
		t.Fatalf("after two failed fetches: %+v, was %+v", got, m)
	}
}

func TestRemoteKeySetMetricsBeforeTheFirstFetch(t *testing.T) {
	t.Parallel()
	server := newJWKSServer(t, newKeyring(t, token.AlgRS256))
	gate := make(chan struct{}) // the first fetch waits for the test's end
	server.mu.Lock()
	server.gate = gate
	server.mu.Unlock()
	reg := prometheus.NewRegistry()
	newRemote(t, server, token.RemoteOptions{Metrics: reg})
	t.Cleanup(func() { close(gate) }) // before the key set's shutdown
	if m := readJWKSMetrics(t, reg); m.successes != 0 || m.failures != 0 || m.keys != 0 || m.lastSuccess.Unix() != 0 {
		t.Fatalf("before any fetch: %+v, want zeros", m)
	}
}

func TestRemoteKeySetRefusesASecondKeySetOnOneRegistry(t *testing.T) {
	t.Parallel()
	server := newJWKSServer(t, newKeyring(t, token.AlgRS256))
	reg := prometheus.NewRegistry()
	newRemote(t, server, token.RemoteOptions{Metrics: reg})
	rks, err := token.NewRemoteKeySet(context.Background(), server.URL, token.RemoteOptions{Metrics: reg})
	if err == nil {
		_ = rks.Close()
		t.Fatal("a second key set registered its metrics on the same registry")
	}
}

// refetch makes the key set fetch once more: RefreshKeySet, until the
// server has seen the request (a call within MinRefreshInterval of the
// last one does not fetch). It returns when that fetch has ended.
func (r *remoteFixture) refetch(t *testing.T) {
	t.Helper()
	n := r.server.requests.Load()
	eventually(t, 5*time.Second, "a refetch", func() bool {
		if _, err := r.remote.RefreshKeySet(context.Background()); err != nil {
			t.Fatal(err)
		}
		return r.server.requests.Load() > n
	})
}

type jwksMetrics struct {
	successes, failures, keys float64
	lastSuccess               time.Time
}

func readJWKSMetrics(t *testing.T, reg *prometheus.Registry) jwksMetrics {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var m jwksMetrics
	seen := 0
	for _, f := range families {
		switch f.GetName() {
		case "jwks_refreshes_total":
			for _, s := range f.GetMetric() {
				switch result := s.GetLabel()[0].GetValue(); result {
				case "success":
					m.successes = s.GetCounter().GetValue()
				case "failure":
					m.failures = s.GetCounter().GetValue()
				default:
					t.Errorf("jwks_refreshes_total{result=%q}", result)
				}
			}
		case "jwks_keys":
			m.keys = f.GetMetric()[0].GetGauge().GetValue()
		case "jwks_last_refresh_success_timestamp_seconds":
			m.lastSuccess = time.Unix(0, int64(f.GetMetric()[0].GetGauge().GetValue()*1e9))
		default:
			continue
		}
		seen++
	}
	if seen != 3 {
		t.Fatalf("%d of the 3 JWKS metrics registered", seen)
	}
	return m
}
