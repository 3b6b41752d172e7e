// Package delivery sends webhook deliveries over HTTP: the
// dialler that refuses every address the IANA special-purpose
// registries do not mark globally reachable, checked when dialling, after
// DNS, on every address (Dialer); one signed POST per attempt (Sender);
// and the engine that claims fan-out and delivery work from MongoDB with
// leases and runs it with a bounded number of requests per endpoint
// (Engine). The rules of what an outcome means are webhook.Service's.
package delivery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/platform/pkg/tracing"
	"github.com/acme/platform/services/conversations/webhook"
)

// MaxResponseBody is how much of a response body is read (and dropped).
const MaxResponseBody = 64 << 10

// DefaultTimeout is how long an attempt waits for a 2xx.
const DefaultTimeout = 15 * time.Second

// Sender makes the HTTP request of one attempt.
type Sender struct {
	client  *http.Client
	timeout time.Duration
	// UserAgent names the sender to receivers.
	UserAgent string
}

// NewSender returns a Sender dialling through d, waiting at most timeout
// for a response, following no redirect and using no proxy. inFlight is
// the most requests it makes at once (the engine's Workers; 0:
// DefaultWorkers).
func NewSender(d *Dialer, timeout time.Duration, inFlight int) *Sender {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if inFlight <= 0 {
		inFlight = DefaultWorkers
	}
	transport := &http.Transport{
		Proxy:             nil, // never a proxy from the environment
		DialContext:       d.DialContext,
		ForceAttemptHTTP2: true,
		// One per request in flight: endpoints often share a host (the
		// ingest of one SaaS, a local receiver), and with fewer kept idle
		// every request past them opened a new connection.
		MaxIdleConnsPerHost:    inFlight,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &Sender{
		client: &http.Client{
			Transport: transport,
			Timeout:   timeout,
			// A redirect is a failed attempt, never followed: it could
			// lead anywhere, past the address check of the first URL.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		timeout:   timeout,
		UserAgent: "acme-webhooks/1",
	}
}

// Send POSTs the attempt's payload to its URL, signed with its secrets at
// the current time, and reports the outcome.
//
// When tracing is on, the attempt is a client span that continues the
// trace of the request whose change the event is (see attemptSpan), and
// the request carries its traceparent, so that the receiver can continue
// it too.
func (s *Sender) Send(ctx context.Context, a webhook.Attempt) webhook.AttemptResult {
	start := time.Now()
	ctx, span := attemptSpan(ctx, a)
	result := func(status int, msg string, retryAfter time.Duration) webhook.AttemptResult {
		if span != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
			if msg != "" {
				span.SetStatus(codes.Error, "")
			}
			span.End()
		}
		return webhook.AttemptResult{Status: status, Duration: time.Since(start), Error: msg, RetryAfter: retryAfter}
	}
	sig, err := webhook.Sign(a.Secrets, a.Delivery.EventID, start, a.Delivery.Payload)
	if err != nil {
		return result(0, "cannot sign: "+err.Error(), 0)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL, bytes.NewReader(a.Delivery.Payload))
	if err != nil {
		return result(0, "invalid endpoint URL", 0)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.UserAgent)
	req.Header.Set("webhook-id", a.Delivery.EventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(start.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	tracing.Inject(ctx, req.Header)
	resp, err := s.client.Do(req)
	if err != nil {
		return result(0, describe(err, s.timeout), 0)
	}
	defer resp.Body.Close()
	// Read the body to its end (so the connection can be reused), never
	// more than MaxResponseBody: a 2xx counts only once it is complete.
	_, readErr := io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseBody))
	status := resp.StatusCode
	switch {
	case status >= 200 && status < 300:
		if readErr != nil {
			return result(status, incomplete(status, readErr, s.timeout), 0)
		}
		return result(status, "", 0)
	case status >= 300 && status < 400:
		return result(status, fmt.Sprintf("the endpoint answered a redirect (%d), which is not followed", status), 0)
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		return result(status, fmt.Sprintf("the endpoint answered %d", status), retryAfter(resp.Header.Get("Retry-After"), time.Now()))
	default:
		return result(status, fmt.Sprintf("the endpoint answered %d", status), 0)
	}
}

// retryAfter parses a Retry-After: seconds or an HTTP date; 0 when absent
// or malformed.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(webhook.MaxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), webhook.MaxRetryAfter)
	}
	return 0
}

// describe is the error of an attempt that got no response: clear to the
// account's operators, and never an internal detail beyond the address.
func describe(err error, timeout time.Duration) string {
	var refused *RefusedError
	if errors.As(err, &refused) {
		return refused.Error()
	}
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		return "the endpoint's host name does not resolve: " + dnsErr.Name
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return fmt.Sprintf("no response within %s", timeout)
	case errors.Is(err, context.Canceled):
		return "the attempt was interrupted (the service stopped)"
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return "cannot connect to the endpoint: " + opErr.Err.Error()
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	return "the request failed: " + err.Error()
}

// incomplete is the error of a 2xx whose body did not arrive whole: the
// attempt failed, since the receiver may not have finished with it.
func incomplete(status int, err error, timeout time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return fmt.Sprintf("the endpoint answered %d but sent no complete response within %s", status, timeout)
	}
	if errors.Is(err, context.Canceled) {
		return "the attempt was interrupted (the service stopped)"
	}
	return fmt.Sprintf("the endpoint answered %d but its response broke off: %v", status, err)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// attemptSpan starts the span of one attempt when tracing is on (nil
// otherwise): a child of the request that made the change, whose trace
// the delivery keeps (a root when it kept none), and linked to it too,
// since the attempt may come long after that request ended.
func attemptSpan(ctx context.Context, a webhook.Attempt) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, nil
	}
	parent := tracing.SpanContext(a.Delivery.Trace)
	var opts []trace.SpanStartOption
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: parent}))
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	opts = append(opts, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("http.request.method", "POST"),
		attribute.String("acme.webhook.delivery_id", a.Delivery.ID),
		attribute.String("acme.webhook.endpoint_id", a.Delivery.EndpointID),
		attribute.String("acme.event.id", a.Delivery.EventID),
		attribute.String("acme.event.type", a.Delivery.EventType),
		attribute.Int("acme.webhook.attempt", a.Delivery.Attempts+1),
	))
	return tracing.Start(ctx, "webhook attempt", opts...)
}
