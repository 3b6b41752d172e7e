package web

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/problem"
)

// RouteRefused is the route label of the requests Go's HTTP server refused
// before any handler ran (malformed request line or headers, headers over
// the limit, an unsupported transfer coding).
const RouteRefused = "refused"

// refusalHeaders is the header block net/http writes, straight to the
// connection, when it refuses a request it cannot parse (net/http's
// conn.serve): the status line, then exactly these headers. A response of a
// handler never looks like this: it always carries a Date header.
const refusalHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// refusals records, and answers as problem+json, the requests net/http
// refuses before routing: these never reach the observer of the handler,
// so without it the client would get text/plain with no request id while
// the access log and the metrics saw nothing.
type refusals struct {
	logger   *slog.Logger
	duration *prometheus.HistogramVec // nil without a registry
}

// observeRefusals wraps l so that every refusal of net/http on its
// connections is answered as problem+json with an X-Request-ID, and gets an
// access log line and a metric (route "refused"), with cfg's logger and
// registry.
func observeRefusals(l net.Listener, cfg Config) net.Listener {
	r := &refusals{logger: cfg.Logger}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics != nil {
		r.duration = requestDuration(cfg.Metrics)
	}
	return refusingListener{Listener: l, refusals: r}
}

type refusingListener struct {
	net.Listener
	refusals *refusals
}

func (l refusingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &refusingConn{Conn: c, refusals: l.refusals}, nil
}

// requestHeadBytes is how much of a request's first bytes a connection
// keeps: enough for any method the metric labels by name.
const requestHeadBytes = 16

// refusingConn watches what net/http writes to one connection: a refusal
// is replaced by its problem+json answer and recorded. It keeps the first
// bytes of the request being read (for its method) and when they came (for
// the latency).
type refusingConn struct {
	net.Conn
	refusals *refusals

	mu      sync.Mutex // net/http reads in the background while a handler writes
	head    []byte
	started time.Time
}

func (c *refusingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		if len(c.head) < requestHeadBytes {
			if len(c.head) == 0 {
				c.started = time.Now()
			}
			c.head = append(c.head, b[:min(n, requestHeadBytes-len(c.head))]...)
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *refusingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	head, started := c.head, c.started
	// What is read after a response is the next request.
	c.head, c.started = nil, time.Time{}
	c.mu.Unlock()
	netStatus, netReason, ok := parseRefusal(b)
	if !ok {
		return c.Conn.Write(b)
	}
	p, reason := refusalProblem(netStatus, netReason)
	id := newRequestID()
	// Recorded first, like a routed request's line, which is written
	// before its response leaves the buffer.
	c.refusals.record(c.Conn.RemoteAddr(), head, started, p.Status, reason, id)
	_, err := c.Conn.Write(refusalResponse(p, id))
	// net/http only checks whether its own bytes went out.
	return len(b), err
}

// CloseWrite passes the half-close net/http does after a 431 (so that the
// client reads the answer before the connection closes) on to TCP.
func (c *refusingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// parseRefusal recognises a refusal of net/http and returns its status and
// net/http's reason ("" when it gives none).
func parseRefusal(b []byte) (status int, reason string, ok bool) {
	rest, found := bytes.CutPrefix(b, []byte("HTTP/1.1 "))
	if !found {
		return 0, "", false
	}
	// Only the status line is searched: every response's first write
	// passes here, and a refusal's headers follow its status line at once.
	end := bytes.Index(rest, []byte("\r\n"))
	if end < 4 || !bytes.HasPrefix(rest[end:], []byte(refusalHeaders)) {
		return 0, "", false
	}
	line := rest[:end] // "431 Request Header Fields Too Large", "400 Bad Request: missing required Host header"
	if bytes.ContainsAny(line, "\r\n") || line[3] != ' ' {
		return 0, "", false
	}
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil || status < 400 || status > 599 {
		return 0, "", false
	}
	if _, after, found := bytes.Cut(line, []byte(": ")); found {
		reason = string(after)
	}
	return status, reason, true
}

// refusalProblem is the problem+json answer of a refusal of net/http,
// given its status and reason, and the reason to log. Every refusal is the
// client's doing, so it is a 4xx: net/http's 501 to a transfer coding
// other than chunked (RFC 9112's choice) and 505 to an HTTP version other
// than 1.x become 400s with their own codes, since no answer of these
// services is a 5xx but the 503s.
func refusalProblem(netStatus int, netReason string) (*problem.Problem, string) {
	switch netStatus {
	case http.StatusRequestHeaderFieldsTooLarge:
		return problem.New(netStatus, problem.CodeHeadersTooLarge, "The request's headers are over the limit."),
			cmp.Or(netReason, "headers over the limit")
	case http.StatusNotImplemented:
		return problem.New(http.StatusBadRequest, problem.CodeUnsupportedEncoding, "The request's transfer coding is not supported (only chunked is)."),
			cmp.Or(netReason, "unsupported transfer encoding")
	case http.StatusHTTPVersionNotSupported:
		return problem.New(http.StatusBadRequest, problem.CodeMalformedRequest, "The request's HTTP version is not supported (only HTTP/1.x is)."),
			cmp.Or(netReason, "unsupported HTTP version")
	}
	status := netStatus
	if status >= 500 {
		status = http.StatusBadRequest
	}
	detail := "The request is not valid HTTP."
	if netReason != "" {
		detail = "The request is not valid HTTP: " + netReason + "."
	}
	return problem.New(status, problem.CodeMalformedRequest, detail), cmp.Or(netReason, "malformed request")
}

// refusalResponse is the whole HTTP response of a refusal: p, with a
// request id. The connection closes after it, as net/http intends.
func refusalResponse(p *problem.Problem, requestID string) []byte {
	body, _ := json.Marshal(p) // a Problem always marshals
	body = append(body, '\n')
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", p.Status, http.StatusText(p.Status))
	fmt.Fprintf(&b, "Content-Type: %s\r\nCache-Control: no-store\r\n%s: %s\r\n", problem.ContentType, HeaderRequestID, requestID)
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes()
}

// record writes the access log line and the metric of a refusal, like the
// observer does for every routed request. A refusal is the client's doing
// (nothing failed in the server), so it is logged at info level whatever
// its status.
func (r *refusals) record(remote net.Addr, head []byte, started time.Time, status int, reason, requestID string) {
	method := ""
	if m, _, found := bytes.Cut(head, []byte(" ")); found {
		method = string(m)
	}
	var took time.Duration
	if !started.IsZero() {
		took = time.Since(started)
	}
	if r.duration != nil {
		r.duration.WithLabelValues(RouteRefused, methodLabel(method), strconv.Itoa(status)).Observe(took.Seconds())
	}
	remoteIP := remote.String()
	if host, _, err := net.SplitHostPort(remoteIP); err == nil {
		remoteIP = host
	}
	r.logger.LogAttrs(context.Background(), slog.LevelInfo, "http request",
		slog.String("request_id", requestID),
		slog.String("method", methodLabel(method)),
		slog.String("route", RouteRefused),
		slog.Int("status", status),
		slog.Float64("latency_ms", float64(took.Microseconds())/1000),
		slog.String("remote_ip", remoteIP),
		slog.String("reason", reason),
	)
}
