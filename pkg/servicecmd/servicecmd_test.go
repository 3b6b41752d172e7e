package servicecmd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/servicecmd"
)

func TestHealthCheck(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"unavailable","failing":["mongodb"]}`))
			return
		}
		w.Write([]byte(`{"status":"ready"}`))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	// ":port" is how services are configured; the check dials loopback.
	if err := servicecmd.HealthCheck(context.Background(), ":"+port); err != nil {
		t.Fatalf("ready service: %v", err)
	}
	ready.Store(false)
	err := servicecmd.HealthCheck(context.Background(), ":"+port)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "mongodb") {
		t.Fatalf("unready service: %v", err)
	}
	if err := servicecmd.HealthCheck(context.Background(), "127.0.0.1:1"); err == nil {
		t.Fatal("nothing listening: no error")
	}
	if err := servicecmd.HealthCheck(context.Background(), "no-port"); err == nil {
		t.Fatal("bad address: no error")
	}
}

// service is a Service on free loopback ports with init as its Init.
func service(t *testing.T, init func(context.Context) (http.Handler, error)) servicecmd.Service {
	t.Helper()
	return servicecmd.Service{
		Name:     "test",
		Logger:   slog.New(slog.DiscardHandler),
		APIAddr:  "127.0.0.1:0",
		OpsAddr:  "127.0.0.1:0",
		Drain:    time.Second,
		Registry: servicecmd.NewRegistry(),
		Init:     init,
	}
}

func TestInitErrorsThatRetryingCannotFixEndRunAtOnce(t *testing.T) {
	var calls atomic.Int32
	bad := errors.New("key file k.pem: no PEM block")
	s := service(t, func(context.Context) (http.Handler, error) {
		calls.Add(1)
		return nil, bad
	})
	// Retrying would never end before this deadline: it backs off up to
	// 10 s between attempts and only stops when ctx does.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := s.Run(ctx)
	if !errors.Is(err, bad) || ctx.Err() != nil {
		t.Fatalf("Run = %v (ctx %v), want the Init error at once", err, ctx.Err())
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("Init ran %d times, want 1", n)
	}
}

func TestInitIsRetriedWhileTheDatabaseIsUnavailable(t *testing.T) {
	var calls atomic.Int32
	ready := make(chan struct{})
	s := service(t, func(context.Context) (http.Handler, error) {
		if calls.Add(1) < 3 {
			return nil, fmt.Errorf("create index: %w", errors.Join(problem.ErrUnavailable, errors.New("server selection timeout")))
		}
		close(ready)
		return http.NotFoundHandler(), nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run ended while the database was unavailable: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after shutdown = %v", err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("Init ran %d times, want 3", n)
	}
}
