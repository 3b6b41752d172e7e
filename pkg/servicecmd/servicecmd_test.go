package servicecmd_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

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
