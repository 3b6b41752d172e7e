package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether one dependency is usable; nil means ready.
type Check func(ctx context.Context) error

// OpsHandler serves the operations endpoints on their own listener, away
// from the public API:
//   - /healthz: the process is alive (always 200 while it can answer);
//   - /readyz: every check passes (200) or not (503, with the failing names;
//     logger receives each failure with its cause, which the answer leaves
//     out);
//   - /metrics: Prometheus metrics from gatherer, in the OpenMetrics format
//     to a scraper that asks for it (the only one that carries exemplars:
//     the latency histogram's trace ids).
func OpsHandler(logger *slog.Logger, gatherer prometheus.Gatherer, checks map[string]Check) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		// Only the names of failing checks are shown: the endpoint may be
		// scraped by anyone on the cluster network, and driver messages can
		// carry hosts and user names.
		failing := []string{}
		for name, check := range checks {
			if err := check(ctx); err != nil {
				failing = append(failing, name)
				logger.WarnContext(r.Context(), "not ready", "check", name, "error", err.Error())
			}
		}
		sort.Strings(failing)
		if len(failing) > 0 {
			writeStatus(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "failing": failing})
			return
		}
		writeStatus(w, http.StatusOK, map[string]any{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	return mux
}

func writeStatus(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// WithProfiling adds net/http/pprof's handlers under /debug/pprof/ to an
// operations handler, for CPU and heap profiles of a running service
// ("go tool pprof http://host:ops/debug/pprof/profile"). Off by default:
// profiles reveal code paths and cost CPU, and the operations port must
// stay private when they are on.
func WithProfiling(ops http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.Handle("/", ops)
	return mux
}
