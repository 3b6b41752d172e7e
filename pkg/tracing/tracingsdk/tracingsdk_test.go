package tracingsdk_test

import (
	"context"
	"testing"

	"github.com/acme/platform/pkg/tracing"
	"github.com/acme/platform/pkg/tracing/tracingsdk"
)

func TestOffCostsNothing(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	stop, err := tracingsdk.Setup(context.Background(), "svc", "v1")
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	ctx, span := tracing.Start(context.Background(), "work")
	if tracing.On() || span.IsRecording() || ctx != context.Background() || tracing.Parent(ctx) != "" {
		t.Fatal("tracing off still made a span or a context")
	}
}

func TestOnRecordsAndStops(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	stop, err := tracingsdk.Setup(context.Background(), "svc", "v1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tracing.Off)
	ctx, span := tracing.Start(context.Background(), "work")
	if !tracing.On() || !span.IsRecording() || tracing.Parent(ctx) == "" {
		t.Fatal("tracing configured made no recorded span")
	}
	span.End()
	if err := stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func TestRefusesAnUnknownExporter(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
	if _, err := tracingsdk.Setup(context.Background(), "svc", "v1"); err == nil {
		t.Fatal("an unknown OTEL_TRACES_EXPORTER was accepted")
	}
}
