package web

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/tracing"
)

// startSpan starts the server span of a request when tracing is on,
// continuing the caller's traceparent, and puts it in the request's
// context; off, it returns nil at once.
func startSpan(c *echo.Context) trace.Span {
	if !tracing.On() {
		return nil
	}
	r := c.Request()
	ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := tracing.Start(ctx, spanName(r.Method, c.Path()), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", methodLabel(r.Method))))
	c.SetRequest(r.WithContext(ctx))
	return span
}

// endSpan ends the request's server span with what the access log
// records: the route (the template, never the path with its ids), the
// status written and who the caller was (their account and client or
// user id, from the verified token; never the token itself).
func endSpan(span trace.Span, c *echo.Context, route string, status int) {
	if span == nil {
		return
	}
	if route != c.Path() { // Path is the name the span started with
		span.SetName(spanName(c.Request().Method, route))
	}
	// One call: each takes the span's lock and grows its attributes.
	attrs := make([]attribute.KeyValue, 3, 5)
	attrs[0] = attribute.String("http.route", openAPIPath(route))
	attrs[1] = attribute.Int("http.response.status_code", status)
	attrs[2] = attribute.String("request.id", RequestIDFrom(c.Request().Context()))
	if claims, ok := token.ClaimsFromContext(c.Request().Context()); ok {
		attrs = append(attrs, attribute.String("acme.account_id", claims.AccountID))
		if claims.IsClient() {
			attrs = append(attrs, attribute.String("acme.client_id", claims.ClientID))
		} else {
			attrs = append(attrs, attribute.String("enduser.id", claims.Subject))
		}
	}
	span.SetAttributes(attrs...)
	if status >= http.StatusInternalServerError || status == StatusNoResponse {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// spanName is "METHOD /route/{param}", the route as the OpenAPI
// documents write it.
func spanName(method, route string) string {
	if route == "" || route == routeUnmatched {
		return methodLabel(method)
	}
	return methodLabel(method) + " " + openAPIPath(route)
}

// openAPIPaths caches openAPIPath: routes are few and fixed.
var openAPIPaths sync.Map // Echo route → OpenAPI path

// openAPIPath turns Echo's "/v1/conversations/:id" into
// "/v1/conversations/{id}".
func openAPIPath(route string) string {
	if !strings.Contains(route, ":") {
		return route
	}
	if p, ok := openAPIPaths.Load(route); ok {
		return p.(string)
	}
	parts := strings.Split(route, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") {
			parts[i] = "{" + p[1:] + "}"
		}
	}
	p := strings.Join(parts, "/")
	openAPIPaths.Store(route, p)
	return p
}

// traceIDs returns the trace and span ids of ctx's span when it is
// sampled (for the access log line and the metric's exemplar).
func traceIDs(ctx context.Context) (traceID, spanID string, ok bool) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return "", "", false
	}
	return sc.TraceID().String(), sc.SpanID().String(), true
}
