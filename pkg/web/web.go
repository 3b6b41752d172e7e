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
)

// Config configures New.
type Config struct {
	// Logger receives access logs and the causes of 5xx answers.
	Logger *slog.Logger
	// Metrics, when set, receives per-route request metrics.
	Metrics prometheus.Registerer
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed (see ClientIP). Empty: the TCP peer is the client.
	TrustedProxies []netip.Prefix
}

// New returns an Echo instance with the shared middleware chain: request id,
// panic recovery, access log and metrics, and the problem+json error handler.
// Routes are added by the caller.
func New(cfg Config) *echo.Echo {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := echo.NewWithConfig(echo.Config{
		Logger:           logger,
		HTTPErrorHandler: ErrorHandler(logger),
		// Only the direct peer and the configured proxies are trusted:
		// X-Forwarded-For from anyone could otherwise spoof the address
		// that logs and throttling rely on.
		IPExtractor: ClientIP(cfg.TrustedProxies),
	})
	e.Use(RequestID())
	if cfg.Metrics != nil {
		e.Use(newMetrics(cfg.Metrics).middleware)
	}
	e.Use(AccessLog(logger))
	e.Use(Recover(logger))
	return e
}
