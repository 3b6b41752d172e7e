package web

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/token"
)

// routeUnmatched labels requests that matched no route (404, 405), so that
// arbitrary URLs cannot grow the metrics' label sets.
const routeUnmatched = "unmatched"

// observer is the one place where a response gets its status: it turns a
// handler's error (or panic) into the problem+json the client receives,
// then writes the access log line and the metric from the status that was
// actually written. Nothing after it can change the answer, so the client,
// the log and the metrics always agree.
type observer struct {
	logger     *slog.Logger
	problemFor func(error) *problem.Problem
	duration   *prometheus.HistogramVec // nil without a registry
}

// newObserver panics, like prometheus.MustRegister, when reg holds another
// metric under the HTTP metric's name: a programming error.
func newObserver(logger *slog.Logger, reg prometheus.Registerer, problemFor func(error) *problem.Problem) *observer {
	o := &observer{logger: logger, problemFor: problemFor}
	if reg == nil {
		return o
	}
	// Every Echo instance of a process (the API, and the start-up answer
	// before it: Pending) records into the same series.
	o.duration = RegisterShared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "http_request_duration_seconds",
		Help:    "Duration of HTTP requests by route pattern, method and the status written to the client.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route", "method", "status"}))
	return o
}

// middleware must be the outermost middleware but for RequestID.
func (o *observer) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		start := time.Now()
		stack, err := callRecovering(next, c)
		status := o.respond(c, err)
		o.record(c, status, time.Since(start), err, stack)
		return nil
	}
}

// callRecovering runs next and turns a panic into an error, with the stack,
// so that one bad request can never take the process down.
func callRecovering(next echo.HandlerFunc, c *echo.Context) (stack []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v) // net/http's way to abort a response on purpose
			}
			stack, err = debug.Stack(), fmt.Errorf("panic: %v", v)
		}
	}()
	return nil, next(c)
}

// respond writes err as problem+json unless the response is already on
// its way, and returns the status the client received.
func (o *observer) respond(c *echo.Context, err error) int {
	resp, _ := echo.UnwrapResponse(c.Response())
	if resp.Committed {
		return resp.Status
	}
	if err == nil {
		// A handler that wrote nothing: net/http sends 200.
		return http.StatusOK
	}
	p := o.problemFor(err)
	if werr := problem.Write(c.Response(), p); werr != nil {
		o.logger.DebugContext(c.Request().Context(), "write problem", "error", werr)
	}
	return p.Status
}

// record writes the access log line and the metric of one response. It
// logs the route pattern rather than the raw URL and never logs headers or
// bodies, so no token or password can reach the log through it. The cause
// of a 5xx is logged here, with the request id, and never sent.
func (o *observer) record(c *echo.Context, status int, took time.Duration, err error, stack []byte) {
	r := c.Request()
	route := c.Path()
	if route == "" {
		route = routeUnmatched
	}
	if o.duration != nil {
		o.duration.WithLabelValues(route, methodLabel(r.Method), strconv.Itoa(status)).Observe(took.Seconds())
	}
	attrs := []slog.Attr{
		slog.String("request_id", RequestIDFrom(r.Context())),
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.Int("status", status),
		slog.Float64("latency_ms", float64(took.Microseconds())/1000),
		slog.String("remote_ip", c.RealIP()),
	}
	level := levelFor(status)
	if err != nil && status >= http.StatusInternalServerError {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if stack != nil {
		attrs = append(attrs, slog.String("stack", string(stack)))
	}
	o.logger.LogAttrs(r.Context(), level, "http request", attrs...)
}

// levelFor is the log level of a response: a client's mistake (4xx) is
// information, an unavailable dependency (503) a warning the service
// recovers from by itself, and only any other 5xx an error to page for.
func levelFor(status int) slog.Level {
	switch {
	case status == http.StatusServiceUnavailable:
		return slog.LevelWarn
	case status >= http.StatusInternalServerError:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// methodLabel keeps the method label bounded: a client may send any token
// as a method, and each would otherwise become a new series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// ProblemFor decides the status and code of what the shared plumbing
// refuses, and is where each service's own decision (web.Config.ProblemFor)
// ends: problems pass through as they are (see problem.From for validation
// errors and unavailable dependencies); a body the decoder refuses, a
// bearer token the middleware refuses, a missing scope, and Echo's router
// errors (unknown route, wrong method) get their contract code; anything
// else is a 500 whose cause is logged and never shown.
func ProblemFor(err error) *problem.Problem {
	var request *RequestError
	var bearer *token.BearerError
	var scope *token.ScopeError
	switch {
	case errors.As(err, &request):
		switch request.Kind {
		case ErrUnsupportedMediaType:
			return problem.New(http.StatusUnsupportedMediaType, problem.CodeUnsupportedMediaType, request.Detail)
		case ErrBodyTooLarge:
			return problem.New(http.StatusRequestEntityTooLarge, problem.CodeBodyTooLarge, request.Detail)
		default:
			return problem.BadRequest(problem.CodeMalformedJSON, request.Detail)
		}
	case errors.As(err, &bearer):
		if bearer.KeysUnavailable {
			return problem.KeysUnavailable()
		}
		return problem.InvalidToken(bearer.Reason)
	case errors.As(err, &scope):
		p := problem.New(http.StatusForbidden, token.CodeInsufficientScope, "The token lacks the scope "+scope.Scope+".")
		p.Challenge = `Bearer error="insufficient_scope", scope="` + scope.Scope + `"`
		return p
	case errors.Is(err, token.ErrAmbiguousCredentials):
		p := problem.New(http.StatusBadRequest, token.CodeInvalidRequest, "The request carries more than one set of credentials.")
		p.Challenge = `Bearer error="invalid_request"`
		return p
	}
	if p := problem.From(err); p.Status != http.StatusInternalServerError {
		return p
	}
	switch echo.StatusCode(err) {
	case http.StatusNotFound:
		return problem.NotFound("No such resource.")
	case http.StatusMethodNotAllowed:
		return problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, "This method is not allowed on this resource.")
	}
	return problem.Internal()
}
