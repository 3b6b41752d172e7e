package mongoconn

import (
	"context"
	"slices"
	"sync"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/platform/pkg/tracing"
)

// CommandSpans is a command monitor that makes a client span of every
// command sent within a recorded span (a request's, a relay round's):
// named "find conversations", with the database, the command's name and
// its collection, never the command's values or the server's reply.
// Commands outside any trace (the background polls that find nothing) make
// none. Nil when tracing is neither configured (tracing.Configured) nor on:
// no cost per command then.
func CommandSpans() *event.CommandMonitor {
	if !tracing.Configured() && !tracing.On() {
		return nil
	}
	var inFlight sync.Map // commandKey → trace.Span
	finish := func(e event.CommandFinishedEvent, failed bool) {
		v, ok := inFlight.LoadAndDelete(commandKey{e.ConnectionID, e.RequestID})
		if !ok {
			return
		}
		span := v.(trace.Span)
		if failed {
			span.SetStatus(codes.Error, "")
		}
		span.End()
	}
	return &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			if !tracing.On() || !trace.SpanFromContext(ctx).IsRecording() {
				return
			}
			collection := commandCollection(e)
			name := e.CommandName
			if collection != "" {
				name += " " + collection
			}
			attrs := []attribute.KeyValue{
				attribute.String("db.system.name", "mongodb"),
				attribute.String("db.namespace", e.DatabaseName),
				attribute.String("db.operation.name", e.CommandName),
			}
			if collection != "" {
				attrs = append(attrs, attribute.String("db.collection.name", collection))
			}
			_, span := tracing.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
			inFlight.Store(commandKey{e.ConnectionID, e.RequestID}, span)
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { finish(e.CommandFinishedEvent, false) },
		Failed:    func(_ context.Context, e *event.CommandFailedEvent) { finish(e.CommandFinishedEvent, true) },
	}
}

type commandKey struct {
	connection string
	request    int64
}

// commandCollection is the collection a command names: the string value
// of its first element (find, insert, update, delete, aggregate, count,
// …), or getMore's "collection"; "" for commands of no collection.
func commandCollection(e *event.CommandStartedEvent) string {
	field := e.CommandName
	if field == "getMore" {
		field = "collection"
	}
	v, err := e.Command.LookupErr(field)
	if err != nil {
		return ""
	}
	s, _ := v.StringValueOK()
	return s
}

// Monitors is one command monitor that calls each of monitors (nil ones
// skipped) in order: the command counter and the spans on one client.
func Monitors(monitors ...*event.CommandMonitor) *event.CommandMonitor {
	monitors = slices.DeleteFunc(monitors, func(m *event.CommandMonitor) bool { return m == nil })
	switch len(monitors) {
	case 0:
		return nil
	case 1:
		return monitors[0]
	}
	var started []func(context.Context, *event.CommandStartedEvent)
	var succeeded []func(context.Context, *event.CommandSucceededEvent)
	var failed []func(context.Context, *event.CommandFailedEvent)
	for _, m := range monitors {
		if m == nil {
			continue
		}
		if m.Started != nil {
			started = append(started, m.Started)
		}
		if m.Succeeded != nil {
			succeeded = append(succeeded, m.Succeeded)
		}
		if m.Failed != nil {
			failed = append(failed, m.Failed)
		}
	}
	return &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			for _, f := range started {
				f(ctx, e)
			}
		},
		Succeeded: func(ctx context.Context, e *event.CommandSucceededEvent) {
			for _, f := range succeeded {
				f(ctx, e)
			}
		},
		Failed: func(ctx context.Context, e *event.CommandFailedEvent) {
			for _, f := range failed {
				f(ctx, e)
			}
		},
	}
}
