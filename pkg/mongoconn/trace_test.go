package mongoconn_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/pkg/tracing"
	"github.com/acme/platform/pkg/tracing/tracingtest"
)

func command(t *testing.T, doc bson.D) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestCommandSpansNameTheCommandNeverItsValues(t *testing.T) {
	spans := tracingtest.Record(t)
	reg := prometheus.NewRegistry()
	monitor := mongoconn.Monitors(mongoconn.NewCommandCounter(reg).Monitor(), mongoconn.CommandSpans())
	ctx, parent := tracing.Start(context.Background(), "request")

	find := &event.CommandStartedEvent{CommandName: "find", DatabaseName: "app", RequestID: 1, ConnectionID: "c1",
		Command: command(t, bson.D{{Key: "find", Value: "users"}, {Key: "filter", Value: bson.D{{Key: "password", Value: "hunter2-secret"}}}})}
	monitor.Started(ctx, find)
	monitor.Succeeded(ctx, &event.CommandSucceededEvent{CommandFinishedEvent: event.CommandFinishedEvent{CommandName: "find", RequestID: 1, ConnectionID: "c1"}})
	more := &event.CommandStartedEvent{CommandName: "getMore", DatabaseName: "app", RequestID: 2, ConnectionID: "c1",
		Command: command(t, bson.D{{Key: "getMore", Value: int64(7)}, {Key: "collection", Value: "users"}})}
	monitor.Started(ctx, more)
	monitor.Failed(ctx, &event.CommandFailedEvent{CommandFinishedEvent: event.CommandFinishedEvent{CommandName: "getMore", RequestID: 2, ConnectionID: "c1"}})
	// Outside any span: counted, no span.
	monitor.Started(context.Background(), &event.CommandStartedEvent{CommandName: "ping", RequestID: 3, ConnectionID: "c1", Command: command(t, bson.D{{Key: "ping", Value: 1}})})
	parent.End()

	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans, want the request's and two commands'", len(ended))
	}
	want := []struct {
		name   string
		failed bool
	}{{"find users", false}, {"getMore users", true}}
	for i, w := range want {
		sp := ended[i]
		if sp.Name() != w.name || sp.SpanKind() != trace.SpanKindClient || sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d: %q (%v), want %q under the request", i, sp.Name(), sp.SpanKind(), w.name)
		}
		if (sp.Status().Code == codes.Error) != w.failed {
			t.Errorf("span %q: status %v", sp.Name(), sp.Status())
		}
		for _, kv := range sp.Attributes() {
			if strings.Contains(kv.Value.String(), "hunter2") {
				t.Errorf("span %q: attribute %s holds a value of the command", sp.Name(), kv.Key)
			}
		}
	}
	if got := commandsCounted(t, reg); got != 3 {
		t.Errorf("%v commands counted, want 3", got)
	}
}

// commandsCounted is the sum of mongodb_commands_total.
func commandsCounted(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}
