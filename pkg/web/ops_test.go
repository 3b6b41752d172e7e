package web_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/web"
)

func TestOpsHandlerServesProfilesOnlyWhenAsked(t *testing.T) {
	checks := map[string]web.Check{"ok": func(context.Context) error { return nil }}
	plain := web.OpsHandler(slog.New(slog.DiscardHandler), prometheus.NewRegistry(), checks)
	for _, tc := range []struct {
		name    string
		handler http.Handler
		path    string
		want    int
	}{
		{"plain readyz", plain, "/readyz", http.StatusOK},
		{"plain pprof", plain, "/debug/pprof/", http.StatusNotFound},
		{"profiling readyz", web.WithProfiling(plain), "/readyz", http.StatusOK},
		{"profiling metrics", web.WithProfiling(plain), "/metrics", http.StatusOK},
		{"profiling pprof index", web.WithProfiling(plain), "/debug/pprof/", http.StatusOK},
		{"profiling heap", web.WithProfiling(plain), "/debug/pprof/heap", http.StatusOK},
		{"profiling cmdline", web.WithProfiling(plain), "/debug/pprof/cmdline", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != tc.want {
				t.Fatalf("GET %s = %d, want %d", tc.path, rec.Code, tc.want)
			}
		})
	}
}
