package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestWakeAddr(t *testing.T) {
	for _, tc := range []struct{ host, ops, want string }{
		{"", "127.0.0.1:9091", "127.0.0.1:9091"},
		{"", "conversations-0.internal:9091", "conversations-0.internal:9091"},
		{"", ":9091", ""},
		{"", "0.0.0.0:9091", ""},
		{"", "[::]:9091", ""},
		{"", "127.0.0.1:0", ""},
		{"10.0.0.7", ":9091", "10.0.0.7:9091"},
		{"fd00::7", ":9091", "[fd00::7]:9091"}, // a pod's IPv6 address
		{"10.0.0.7", "127.0.0.1:0", ""},
	} {
		if got := wakeAddr(tc.host, tc.ops); got != tc.want {
			t.Errorf("wakeAddr(%q, %q) = %q, want %q", tc.host, tc.ops, got, tc.want)
		}
	}
}

// TestRelayWakerCoalesces: wakes asked while one is under way make one
// more request after it, not one each.
func TestRelayWakerCoalesces(t *testing.T) {
	var woken atomic.Int32
	first := make(chan struct{})
	release := make(chan struct{})
	handler := relayWakeHandler(func() {
		if woken.Add(1) == 1 {
			close(first)
			<-release
		}
	})
	mux := http.NewServeMux()
	mux.Handle("POST "+relayWakePath, handler)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	w := newRelayWaker(slog.New(slog.DiscardHandler))
	w.wake(addr, relayWakePath)
	<-first // the first wake is being answered
	for range 10 {
		w.wake(addr, relayWakePath)
	}
	close(release)
	waitIdle(t, w, srv.URL+relayWakePath)
	if n := woken.Load(); n != 2 {
		t.Fatalf("%d wakes reached the holder, want 2 (the first, then one for the ten asked meanwhile)", n)
	}
	// A GET is not a wake.
	resp, err := http.Get(srv.URL + relayWakePath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || woken.Load() != 2 {
		t.Fatalf("GET: %d, %d wakes", resp.StatusCode, woken.Load())
	}
}

// TestRelayWakerWarnsOnceWhileFailing: a holder that cannot be reached
// is a warning at the first failure, not at each wake.
func TestRelayWakerWarnsOnceWhileFailing(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close() // nobody listens there now
	var logs strings.Builder
	var mu sync.Mutex
	w := newRelayWaker(slog.New(slog.NewTextHandler(&lockedWriter{&mu, &logs}, nil)))
	for range 3 {
		w.wake(addr, relayWakePath)
		waitIdle(t, w, srv.URL+relayWakePath)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "level=WARN msg=\"wake relay\""); n != 1 {
		t.Fatalf("%d warnings for 3 failed wakes, want 1:\n%s", n, logs.String())
	}
}

// waitIdle waits until w has no wake of url under way.
func waitIdle(t *testing.T, w *relayWaker, url string) {
	t.Helper()
	for {
		w.mu.Lock()
		_, busy := w.pending[url]
		w.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
