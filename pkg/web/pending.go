package web

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/acme/platform/pkg/problem"
)

// Pending is a handler that answers 503 problem+json (with Retry-After)
// until Ready hands it the real handler. It lets a service open its
// listeners at once, report not-ready, and finish initialising (indexes,
// keys) in the background while its database is still coming up.
type Pending struct {
	h atomic.Pointer[http.Handler]
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
	_ = problem.Write(w, problem.Unavailable(2*time.Second))
}
