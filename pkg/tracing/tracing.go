// Package tracing is the services' OpenTelemetry tracing as the code
// that makes spans sees it: whether tracing is on, the W3C propagators,
// and the few helpers the instrumented packages share. It depends on
// OpenTelemetry's API only; tracingsdk installs the SDK's provider from
// the environment. Off (no exporter configured, the default) every helper
// returns at once, so that tracing off costs nothing measurable.
package tracing

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of every span the services make.
const Scope = "github.com/acme/platform"

// on is whether a recording provider is installed (tracingsdk.Setup
// found an exporter, or a test called Use); tracer is its tracer of Scope, taken
// once: asking the SDK's provider for it takes a lock.
var (
	on     atomic.Bool
	tracer atomic.Pointer[trace.Tracer]
)

// On reports whether spans are recorded: false until tracingsdk.Setup
// found an exporter configured (or Use installed a provider).
func On() bool { return compiled && on.Load() }

// Configured reports whether the environment asks for traces: an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or its _TRACES_ form) or an
// exporter named in OTEL_TRACES_EXPORTER other than "none", and
// OTEL_SDK_DISABLED not "true".
func Configured() bool {
	if !compiled || strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false
	case "", "otlp":
		return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return true
	}
}

// Off installs OpenTelemetry's no-op provider and turns the helpers
// off: what tracingsdk.Setup does when tracing is not configured, and
// what a test's recording (tracingtest.Record) does when it ends.
func Off() {
	otel.SetTracerProvider(noop.NewTracerProvider())
	on.Store(false)
}

// Use installs tp as the process's tracer provider, with the W3C
// propagators, and turns the helpers on. tracingsdk.Setup calls it; tests call it
// with a provider that records (sdk/trace/tracetest).
func Use(tp trace.TracerProvider) {
	t := tp.Tracer(Scope)
	tracer.Store(&t)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	on.Store(true)
}

// Start starts a span of the services' scope, a child of ctx's, when
// tracing is on; off, it returns ctx and a no-op span at once.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !On() {
		return ctx, noop.Span{}
	}
	return (*tracer.Load()).Start(ctx, name, opts...)
}

// End ends span, marking it failed when err is not nil. The error's
// message is not recorded: messages can carry values.
func End(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// Parent returns the W3C traceparent of ctx's span when it is recorded
// ("" otherwise, and always when tracing is off): what a change stores
// with the work it leaves for later (a pending event), so that the spans
// of that work can name the request that caused it.
func Parent(ctx context.Context) string {
	if !On() {
		return ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier["traceparent"]
}

// SpanContext parses a traceparent that Parent returned; the zero
// SpanContext (not valid) for "" or anything malformed.
func SpanContext(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// Links are the span links to the valid traceparents of parents (each
// once), for a span of work that several requests caused.
func Links(parents ...string) []trace.Link {
	var links []trace.Link
	seen := map[string]bool{}
	for _, p := range parents {
		if seen[p] {
			continue
		}
		seen[p] = true
		if sc := SpanContext(p); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return links
}

// Inject writes ctx's trace context (traceparent, and baggage) into
// header, for an outgoing request.
func Inject(ctx context.Context, header http.Header) {
	if On() {
		otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(header))
	}
}
