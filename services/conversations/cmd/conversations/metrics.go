package main

import (
	"github.com/prometheus/client_golang/prometheus"
)

// eventMetrics are what operators watch of the events: how
// many changes record, how far the relay is behind, how many streams are
// open and how many were dropped for reading too slowly.
type eventMetrics struct {
	recorded prometheus.Counter
	lag      prometheus.Gauge
	open     prometheus.Gauge
	dropped  prometheus.Counter
	reads    prometheus.Counter
	ordered  prometheus.Counter
}

func newEventMetrics(reg prometheus.Registerer) *eventMetrics {
	m := &eventMetrics{
		recorded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "conversations_events_recorded_total",
			Help: "Events recorded with the changes of conversations (pending, until the relay orders them).",
		}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "conversations_events_relay_lag_seconds",
			Help: "Age of the oldest event not yet ordered into its account's log, when this replica's relay last looked (0: none).",
		}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "conversations_event_streams_open",
			Help: "Event streams open on this replica.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "conversations_event_streams_dropped_total",
			Help: "Event streams this replica ended because their reader did not keep up.",
		}),
		reads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "conversations_event_stream_reads_total",
			Help: "Reads of the event log for this replica's streams: one per poll interval per account with streams open, whatever their number.",
		}),
	}
	m.ordered = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "conversations_events_ordered_total",
		Help: "Events this replica's relay copied into their account's log (each event is counted once, by the replica that ordered it).",
	})
	reg.MustRegister(m.recorded, m.lag, m.open, m.dropped, m.reads, m.ordered)
	return m
}

// relayPartitions registers the relay partitions configured and the
// number this replica leases, read from held at each scrape.
func relayPartitions(reg prometheus.Registerer, count int, held func() int) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "conversations_relay_partitions_held",
		Help: "Relay partitions this replica leases: it orders the events of their accounts.",
	}, func() float64 { return float64(held()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "conversations_relay_partitions",
		Help: "Relay partitions configured (CONVERSATIONS_RELAY_PARTITIONS): the replicas together should lease them all.",
	}, func() float64 { return float64(count) }))
}

func (m *eventMetrics) streamClosed(slow bool) {
	m.open.Dec()
	if slow {
		m.dropped.Inc()
	}
}
