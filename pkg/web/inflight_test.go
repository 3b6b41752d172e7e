package web_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/web"
)

// TestLimitInFlightShedsTheExcessAtOnce: with every slot taken, the next
// request gets the overloaded 503 with Retry-After at once, logged and
// counted as such; once a slot frees up, requests are served again.
func TestLimitInFlightShedsTheExcessAtOnce(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	cfg := web.Config{Logger: slogJSON(logs), Metrics: reg}
	entered, release := make(chan struct{}), make(chan struct{})
	var blocking sync.Once
	h := web.LimitInFlight(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		holds := false
		blocking.Do(func() { holds = true })
		if holds {
			close(entered)
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	}), 1, cfg)

	held := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/slow", nil))
		held <- rec.Code
	}()
	<-entered

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/conversations", nil))
	var body problemBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("shed body %q: %v", rec.Body, err)
	}
	if rec.Code != http.StatusServiceUnavailable || body.Code != problem.CodeOverloaded || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("shed request: %d %q Retry-After %q, want 503 overloaded Retry-After 1", rec.Code, body.Code, rec.Header().Get("Retry-After"))
	}
	id := rec.Header().Get(web.HeaderRequestID)
	var lines []map[string]any
	for _, l := range logs.lines(t) {
		if l["request_id"] == id {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || lines[0]["status"] != float64(503) || lines[0]["route"] != web.RouteShed {
		t.Errorf("access log lines of the shed request: %v", lines)
	}
	if got := series(t, reg); got[web.RouteShed+" GET 503"] != 1 {
		t.Errorf("metric series %v, want one shed 503", got)
	}

	close(release)
	if code := <-held; code != http.StatusNoContent {
		t.Errorf("held request: %d", code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/again", nil))
	if rec.Code != http.StatusNoContent {
		t.Errorf("after the slot freed up: %d, want 204", rec.Code)
	}
}

// TestLeaveInFlightFreesTheSlot: a long-lived response (an event stream)
// that leaves the in-flight count no longer takes a slot from the
// requests that need the database.
func TestLeaveInFlightFreesTheSlot(t *testing.T) {
	t.Parallel()
	cfg := web.Config{Logger: slogJSON(&syncBuffer{}), Metrics: prometheus.NewRegistry()}
	entered, release := make(chan struct{}), make(chan struct{})
	h := web.LimitInFlight(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			web.LeaveInFlight(r.Context())
			web.LeaveInFlight(r.Context()) // a second call is a no-op
			close(entered)
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	}), 1, cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/stream", nil))
	}()
	<-entered
	for range 2 { // the slot is free
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/conversations", nil))
		if rec.Code != http.StatusNoContent {
			t.Fatalf("beside a stream that left: %d", rec.Code)
		}
	}
	close(release)
	<-done
}
