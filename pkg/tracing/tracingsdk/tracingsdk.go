// Package tracingsdk installs the OpenTelemetry SDK's tracer provider
// that package tracing's helpers use, configured by the standard OTEL_*
// environment variables. Only the binaries' wiring (servicecmd) imports
// it: the packages that make spans need OpenTelemetry's API alone, not
// the SDK and its exporters.
package tracingsdk

import (
	"context"
	"fmt"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/acme/platform/pkg/tracing"
)

// Setup installs the process's tracer provider from the environment and
// returns the function that flushes and stops it. Off (see
// tracing.Configured): a no-op provider and no propagators. On: the
// exporter autoexport builds from OTEL_TRACES_EXPORTER and
// OTEL_EXPORTER_OTLP_* (protocol, endpoint, headers, timeout), batched;
// the sampler of OTEL_TRACES_SAMPLER (default parentbased_always_on); the
// resource of OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over service
// (the default name) and version; W3C traceparent and baggage
// propagation.
func Setup(ctx context.Context, service, version string) (func(context.Context) error, error) {
	if !tracing.Configured() {
		tracing.Off()
		return func(context.Context) error { return nil }, nil
	}
	exporter, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("configuration: tracing (OTEL_*): %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.Environment(),
	)
	if err != nil {
		return nil, fmt.Errorf("configuration: tracing resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	tracing.Use(tp)
	return tp.Shutdown, nil
}
