package web

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/problem"
)

// RouteShed is the route label of the requests LimitInFlight refused
// before routing them.
const RouteShed = "shed"

// inFlightLimit lets at most max requests into next at once and answers
// the others at once with the overloaded 503 (see LimitInFlight).
type inFlightLimit struct {
	next     http.Handler
	shed     http.Handler
	max      int64
	inFlight atomic.Int64
}

// LimitInFlight bounds the requests next works on at once to max, and
// answers every request beyond it at once, before routing, with the
// overloaded 503 (problem.Overloaded: Retry-After, code overloaded). A
// replica that queued the excess would only make every request slow and
// then fail them on the database pool's timeout; shedding early keeps the
// requests it took fast and tells the others to retry, possibly on another
// replica. The answers it refuses get a request id, an access log line and
// a metric (route "shed") like any other, logged and measured with cfg
// (share the registry with next: both record into the same series).
// max <= 0 means no bound. The operations listener (/healthz, /readyz,
// /metrics) is served apart and never limited.
func LimitInFlight(next http.Handler, limit int, cfg Config) http.Handler {
	if limit <= 0 {
		return next
	}
	e := New(cfg)
	e.RouteNotFound("/*", func(c *echo.Context) error {
		c.SetPath(RouteShed)
		return problem.Overloaded()
	})
	return &inFlightLimit{next: next, shed: e, max: int64(limit)}
}

func (l *inFlightLimit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if l.inFlight.Add(1) > l.max {
		l.inFlight.Add(-1)
		l.shed.ServeHTTP(w, r)
		return
	}
	var once sync.Once
	leave := func() { once.Do(func() { l.inFlight.Add(-1) }) }
	defer leave()
	l.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), leaveKey{}, leave)))
}

type leaveKey struct{}

// LeaveInFlight takes the request of ctx out of the in-flight count of
// LimitInFlight: a long-lived response (a live event stream) that waits
// for events, not for the database, and is bounded otherwise (streams per
// caller), so that open streams never shed ordinary requests. A no-op
// for a request that was not counted.
func LeaveInFlight(ctx context.Context) {
	if leave, ok := ctx.Value(leaveKey{}).(func()); ok {
		leave()
	}
}
