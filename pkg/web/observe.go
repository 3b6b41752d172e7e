package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync/atomic"
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
	o.duration = requestDuration(reg)
	return o
}

// requestDuration is the HTTP metric on reg. Every Echo instance of a
// process (the API, the start-up answer before it: Pending, the shed
// answers: LimitInFlight) and the refusals of its listener record into the
// same series.
func requestDuration(reg prometheus.Registerer) *prometheus.HistogramVec {
	return RegisterShared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "http_request_duration_seconds",
		Help:    "Duration of HTTP requests by route pattern, method and the status written to the client.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route", "method", "status"}))
}

// middleware must be the outermost middleware but for RequestID.
func (o *observer) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		start := time.Now()
		span := startSpan(c)
		body := &deadlineBody{ReadCloser: c.Request().Body}
		if body.ReadCloser != nil {
			c.Request().Body = body
		}
		stack, err := callRecovering(next, c)
		if body.timedOut.Load() {
			// Whatever the handler made of the cut body (usually a 400),
			// the cause is the server's read timeout.
			err = errBodyTimeout
		}
		status := o.respond(c, err)
		if status == http.StatusRequestEntityTooLarge && body.ReadCloser != nil {
			status = lingerAfterTooLarge(c, body.ReadCloser, status)
		}
		route := o.record(c, status, time.Since(start), err, stack)
		endSpan(span, c, route, status)
		return nil
	}
}

// What of a refused body the server still reads, after its 413, before it
// closes the connection.
const (
	tooLargeLingerTime  = 5 * time.Second
	tooLargeLingerBytes = 64 << 20
)

// lingerAfterTooLarge sends the 413 at once, then reads and drops what the
// client is still sending of its body, for a bounded time and size, and
// returns the status the client got (StatusNoResponse when the answer
// could not be sent). The server closes a connection whose body was
// refused, and closing it with data unread makes the kernel reset it: a
// client still writing its body (curl sending a file, an upload from a
// browser) then failed on the reset and never read the 413 that had been
// sent. nginx reads on for the same reason (lingering_close).
func lingerAfterTooLarge(c *echo.Context, body io.Reader, status int) int {
	rc := http.NewResponseController(c.Response())
	if err := rc.Flush(); err != nil {
		return StatusNoResponse
	}
	_ = rc.SetReadDeadline(time.Now().Add(tooLargeLingerTime))
	_, _ = io.CopyN(io.Discard, body, tooLargeLingerBytes)
	return status
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
	if errors.Is(err, errBodyTimeout) {
		return o.respondAfterBodyTimeout(c, p)
	}
	if werr := problem.Write(c.Response(), p); werr != nil {
		o.logger.DebugContext(c.Request().Context(), "write problem", "error", werr)
	}
	return p.Status
}

// bodyTimeoutWriteGrace is how long the answer to a request whose body
// hit the server's read timeout may take to write. That timeout and the
// write timeout start together, so without more time the answer would be
// cut too, and the client would get nothing while the log said otherwise.
const bodyTimeoutWriteGrace = 5 * time.Second

// respondAfterBodyTimeout sends p (the 408) to a client whose body did
// not arrive before the server's read timeout, and returns the status the
// client got: 0 when the answer could not be written (see
// StatusNoResponse).
func (o *observer) respondAfterBodyTimeout(c *echo.Context, p *problem.Problem) int {
	rc := http.NewResponseController(c.Response())
	_ = rc.SetWriteDeadline(time.Now().Add(bodyTimeoutWriteGrace))
	c.Response().Header().Set("Connection", "close")
	werr := problem.Write(c.Response(), p)
	if werr == nil {
		// Sent now, so that a failure is known before the log line.
		werr = rc.Flush()
	}
	if werr != nil {
		o.logger.DebugContext(c.Request().Context(), "write request timeout", "error", werr)
		return StatusNoResponse
	}
	return p.Status
}

// StatusNoResponse is the status logged and counted for a request whose
// answer could not be written to the client at all (the connection failed
// first): the client got no response, so no HTTP status is claimed.
const StatusNoResponse = 0

// errBodyTimeout is the cause of a request whose body did not arrive
// before the server's read timeout.
var errBodyTimeout = errors.New("request body not received before the read timeout")

// deadlineBody notes whether reading the request body failed on the
// connection's read deadline (the server's ReadTimeout).
type deadlineBody struct {
	io.ReadCloser
	timedOut atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		b.timedOut.Store(true)
	}
	return n, err
}

// record writes the access log line and the metric of one response. It
// logs the route pattern rather than the raw URL and never logs headers or
// bodies, so no token or password can reach the log through it. The cause
// of a 5xx is logged here, with the request id, and never sent. A traced
// request's line carries its trace_id and span_id, and its observation
// the trace id as an exemplar. It returns the route recorded.
func (o *observer) record(c *echo.Context, status int, took time.Duration, err error, stack []byte) string {
	r := c.Request()
	route := c.Path()
	if route == "" {
		route = routeUnmatched
	}
	traceID, spanID, traced := traceIDs(r.Context())
	if o.duration != nil {
		observer := o.duration.WithLabelValues(route, methodLabel(r.Method), strconv.Itoa(status))
		if ex, ok := observer.(prometheus.ExemplarObserver); ok && traced {
			ex.ObserveWithExemplar(took.Seconds(), prometheus.Labels{"trace_id": traceID})
		} else {
			observer.Observe(took.Seconds())
		}
	}
	attrs := []slog.Attr{
		slog.String("request_id", RequestIDFrom(r.Context())),
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.Int("status", status),
		slog.Float64("latency_ms", float64(took.Microseconds())/1000),
		slog.String("remote_ip", c.RealIP()),
	}
	if traced {
		attrs = append(attrs, slog.String("trace_id", traceID), slog.String("span_id", spanID))
	}
	level := levelFor(status)
	if err != nil && status >= http.StatusInternalServerError {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if stack != nil {
		attrs = append(attrs, slog.String("stack", string(stack)))
	}
	o.logger.LogAttrs(r.Context(), level, "http request", attrs...)
	return route
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
// errors (unknown route, wrong method) get their documented code (docs/errors.md); a wait that
// the request's Budget ended is the database-unreachable 503; anything
// else is a 500 whose cause is logged and never shown.
func ProblemFor(err error) *problem.Problem {
	var request *RequestError
	var bearer *token.BearerError
	var scope *token.ScopeError
	switch {
	case errors.Is(err, errBodyTimeout):
		return problem.New(http.StatusRequestTimeout, problem.CodeRequestTimeout, "The request body did not arrive in time.")
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
	case errors.Is(err, token.ErrUserTokenRequired):
		p := problem.New(http.StatusForbidden, token.CodeInsufficientScope, "This route acts for a signed-in user; a service client's token cannot use it.")
		p.Challenge = `Bearer error="insufficient_scope"`
		return p
	case errors.Is(err, token.ErrAmbiguousCredentials):
		p := problem.New(http.StatusBadRequest, token.CodeInvalidRequest, "The request carries more than one set of credentials.")
		p.Challenge = `Bearer error="invalid_request"`
		return p
	}
	if p := problem.From(err); p.Status != http.StatusInternalServerError {
		return p
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return problem.DatabaseUnavailable()
	}
	switch echo.StatusCode(err) {
	case http.StatusNotFound:
		return problem.NotFound("No such resource.")
	case http.StatusMethodNotAllowed:
		return problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, "This method is not allowed on this resource.")
	}
	return problem.Internal()
}
