// Package web is the HTTP plumbing both services share: an Echo instance
// whose every error is RFC 9457 problem+json, request ids, structured access
// logs, Prometheus metrics, strict JSON decoding, and servers that drain on
// shutdown.
package web

import (
	"log/slog"
	"net/netip"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/problem"
)

// Config configures New.
type Config struct {
	// Logger receives access logs and the causes of 5xx answers.
	Logger *slog.Logger
	// Metrics, when set, receives per-route request metrics. Several
	// instances of one process may share it: they record into one series.
	Metrics prometheus.Registerer
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed (see ClientIP). Empty: the TCP peer is the client.
	TrustedProxies []netip.Prefix
	// CORSOrigins are the origins whose web pages may call the API (see
	// cors.go); empty: none. New panics on an invalid entry: check the
	// configuration with ParseCORSOrigins first.
	CORSOrigins []string
	// ProblemFor is the service's one decision of the status and code of a
	// failed request (it ends with ProblemFor for what it does not know);
	// nil: ProblemFor alone.
	ProblemFor func(error) *problem.Problem
}

// New returns an Echo instance whose every response passes through one
// observer (see observe.go): it gets a request id, a handler's error or
// panic becomes the problem+json the client receives, and the access log
// line and the metric record the status actually written. Routes are added
// by the caller.
func New(cfg Config) *echo.Echo {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	problemFor := cfg.ProblemFor
	if problemFor == nil {
		problemFor = ProblemFor
	}
	obs := newObserver(logger, cfg.Metrics, problemFor)
	e := echo.NewWithConfig(echo.Config{
		Logger: logger,
		// The observer answers every error itself and returns nil, so
		// Echo's error handler is reached by nothing it wraps; it still
		// decides statuses the same way, should a middleware ever be put
		// in front of the observer.
		HTTPErrorHandler: func(c *echo.Context, err error) { obs.respond(c, err) },
		// Only the direct peer and the configured proxies are trusted:
		// X-Forwarded-For from anyone could otherwise spoof the address
		// that logs and throttling rely on.
		IPExtractor: ClientIP(cfg.TrustedProxies),
	})
	e.Use(RequestID(), obs.middleware)
	if len(cfg.CORSOrigins) > 0 {
		origins, err := ParseCORSOrigins(cfg.CORSOrigins)
		if err != nil {
			panic(err)
		}
		// Inside the observer, so that a preflight it answers is logged
		// and counted like every other response.
		e.Use(cors(origins))
	}
	return e
}
