package tracing_test

import (
	"context"
	"testing"

	"github.com/acme/platform/pkg/tracing"
	"github.com/acme/platform/pkg/tracing/tracingtest"
)

func TestConfiguredByTheStandardVariables(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
	} {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
			t.Setenv(k, c.env[k])
		}
		if got := tracing.Configured(); got != c.want {
			t.Errorf("%v: Configured %v, want %v", c.env, got, c.want)
		}
	}
}

func TestParentLinksBack(t *testing.T) {
	spans := tracingtest.Record(t)
	ctx, span := tracing.Start(context.Background(), "request")
	parent := tracing.Parent(ctx)
	span.End()
	sc := tracing.SpanContext(parent)
	if !sc.IsValid() || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("traceparent %q does not name the span", parent)
	}
	links := tracing.Links(parent, parent, "", "garbage")
	if len(links) != 1 || links[0].SpanContext.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("links %v, want one to the span", links)
	}
	if len(spans.Ended()) != 1 {
		t.Fatalf("%d spans recorded, want 1", len(spans.Ended()))
	}
}
