package web

import (
	"net/http"
	"sync/atomic"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/problem"
)

// RouteStarting is the route label of the answers Pending gives before the
// service is ready.
const RouteStarting = "starting"

// Pending is a handler that answers 503 problem+json (with the start-up
// Retry-After) until Ready hands it the real handler. It lets a service open
// its listeners at once, report not-ready, and finish initialising (indexes,
// keys) in the background while its database is still coming up. Its
// answers get a request id, an access log line and a metric like any other.
type Pending struct {
	h        atomic.Pointer[http.Handler]
	starting http.Handler
}

// NewPending returns a Pending that logs and measures with cfg (share the
// registry with the real handler: both record into the same series).
func NewPending(cfg Config) *Pending {
	e := New(cfg)
	e.RouteNotFound("/*", func(c *echo.Context) error {
		c.SetPath(RouteStarting)
		return problem.Starting()
	})
	return &Pending{starting: e}
}

// Ready switches to the real handler. It is safe to call while serving.
func (p *Pending) Ready(h http.Handler) { p.h.Store(&h) }

// IsReady reports whether Ready has been called.
func (p *Pending) IsReady() bool { return p.h.Load() != nil }

func (p *Pending) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := p.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	p.starting.ServeHTTP(w, r)
}
