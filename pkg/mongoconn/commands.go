package mongoconn

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/event"
)

// CommandCounter counts the commands a client sends to MongoDB, by command
// name, as mongodb_commands_total. Commands per operation is the cost that
// holds on any store, so the benchmarks and the operators read it beside
// latency.
type CommandCounter struct {
	sent *prometheus.CounterVec
}

// NewCommandCounter registers mongodb_commands_total with reg.
func NewCommandCounter(reg prometheus.Registerer) *CommandCounter {
	c := &CommandCounter{sent: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mongodb_commands_total",
		Help: "Commands sent to MongoDB, by command name (find, insert, update, getMore, ...).",
	}, []string{"command"})}
	reg.MustRegister(c.sent)
	return c
}

// Monitor returns the driver's command monitor that feeds the counter; a
// nil counter gives a nil monitor (nothing counted).
func (c *CommandCounter) Monitor() *event.CommandMonitor {
	if c == nil {
		return nil
	}
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c.sent.WithLabelValues(e.CommandName).Inc()
	}}
}
