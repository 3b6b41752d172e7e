package password_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/services/account/password"
)

// slowParams make one hash last long enough for a queue to form.
var slowParams = password.Params{Memory: 32 * 1024, Iterations: 3, Parallelism: 1, SaltLen: 16, KeyLen: 32}

// hashingMetrics is one reading of a Hasher's metrics.
type hashingMetrics struct {
	slots, inUse, waiting, rejections float64
	waits                             uint64 // hashes that got a slot
}

func readHashingMetrics(t *testing.T, reg *prometheus.Registry) hashingMetrics {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var m hashingMetrics
	seen := map[string]bool{}
	for _, f := range families {
		s := f.GetMetric()[0]
		switch f.GetName() {
		case "account_password_hash_slots":
			m.slots = s.GetGauge().GetValue()
		case "account_password_hash_slots_in_use":
			m.inUse = s.GetGauge().GetValue()
		case "account_password_hash_waiting":
			m.waiting = s.GetGauge().GetValue()
		case "account_password_hash_rejections_total":
			m.rejections = s.GetCounter().GetValue()
		case "account_password_hash_queue_wait_seconds":
			m.waits = s.GetHistogram().GetSampleCount()
		default:
			continue
		}
		seen[f.GetName()] = true
	}
	if len(seen) != 5 {
		t.Fatalf("registered: %v; want the 5 hashing metrics", seen)
	}
	return m
}

// Every hash either gets a slot (and its wait is observed) or is refused
// with ErrBusy (and counted); the gauges return to idle afterwards.
func TestMetricsAccountForEveryHash(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := password.New(password.Options{Params: slowParams, Concurrency: 1, QueueWait: time.Millisecond, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readHashingMetrics(t, reg), (hashingMetrics{slots: 1}); got != want {
		t.Fatalf("idle: %+v, want %+v", got, want)
	}
	const calls = 8
	var busy atomic.Int64
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			_, err := h.Hash(context.Background(), "pw")
			switch {
			case errors.Is(err, password.ErrBusy):
				busy.Add(1)
			case err != nil:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if busy.Load() == 0 {
		t.Fatal("8 concurrent hashes on 1 slot with 1ms queue wait: none was refused")
	}
	want := hashingMetrics{slots: 1, rejections: float64(busy.Load()), waits: uint64(calls - busy.Load())}
	if got := readHashingMetrics(t, reg); got != want {
		t.Fatalf("after %d hashes, %d refused: %+v, want %+v", calls, busy.Load(), got, want)
	}
}

// While the one slot is taken, the calls behind it show as waiting.
func TestMetricsShowTheQueue(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := password.New(password.Options{Params: slowParams, Concurrency: 1, QueueWait: time.Minute, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := h.Hash(context.Background(), "pw"); err != nil {
				t.Error(err)
			}
		})
	}
	// The queue drains one hash at a time, so it is seen in any case
	// while the first two hashes run.
	deadline := time.Now().Add(time.Minute)
	for m := readHashingMetrics(t, reg); m.inUse != 1 || m.waiting < 1; m = readHashingMetrics(t, reg) {
		if time.Now().After(deadline) {
			t.Fatalf("no queue seen: %+v", m)
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if got, want := readHashingMetrics(t, reg), (hashingMetrics{slots: 1, waits: 3}); got != want {
		t.Fatalf("drained: %+v, want %+v", got, want)
	}
}

func TestMetricsOneHasherPerRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := password.New(password.Options{Params: fastParams, Metrics: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := password.New(password.Options{Params: fastParams, Metrics: reg}); err == nil {
		t.Fatal("a second Hasher registered its metrics on the same registry")
	}
}
