package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/deploy/internal/otlprecv"
)

// The local trace printer of make run TRACES=1: both services export their
// spans (OTLP/HTTP) to a receiver here, which prints each trace as a tree
// once no span of it has come for traceQuiet, the way the webhook
// receiver prints deliveries.

// traceQuiet is how long a trace waits for more spans before it prints:
// the services' exporters send every half second here, and a webhook
// attempt, a span of its request's trace, follows the relay and the
// delivery engine's polls (1 s each by default).
const traceQuiet = 5 * time.Second

// traceEnv is what points a service at the local receiver.
func traceEnv(addr string) []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + addr,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=500",
	}
}

// tracePrinter groups spans by trace and prints each trace when it has
// been quiet for traceQuiet.
type tracePrinter struct {
	out io.Writer

	mu     sync.Mutex
	traces map[string]*pendingTrace
}

type pendingTrace struct {
	spans []otlprecv.Span
	timer *time.Timer
}

func (p *tracePrinter) add(spans []otlprecv.Span) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.traces == nil {
		p.traces = map[string]*pendingTrace{}
	}
	for _, s := range spans {
		t, ok := p.traces[s.TraceID]
		if !ok {
			id := s.TraceID
			t = &pendingTrace{timer: time.AfterFunc(traceQuiet, func() { p.flush(id) })}
			p.traces[id] = t
		}
		t.spans = append(t.spans, s)
		t.timer.Reset(traceQuiet)
	}
}

func (p *tracePrinter) flush(id string) {
	p.mu.Lock()
	t := p.traces[id]
	delete(p.traces, id)
	p.mu.Unlock()
	if t != nil {
		fmt.Fprint(p.out, formatTrace(id, t.spans))
	}
}

// formatTrace writes a trace as a tree: each span with its service, its
// duration, its offset from the trace's start, and its links.
func formatTrace(id string, spans []otlprecv.Span) string {
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].Start.Before(spans[j].Start) })
	start := spans[0].Start
	ids := map[string]bool{}
	children := map[string][]otlprecv.Span{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	var roots []otlprecv.Span
	for _, s := range spans {
		if s.ParentID == "" || !ids[s.ParentID] {
			roots = append(roots, s)
			continue
		}
		children[s.ParentID] = append(children[s.ParentID], s)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s (%d spans)\n", id, len(spans))
	var walk func(s otlprecv.Span, depth int)
	walk = func(s otlprecv.Span, depth int) {
		fmt.Fprintf(&b, "  %s%s", strings.Repeat("  ", depth), s.Name)
		if st := s.Attributes["http.response.status_code"]; st != "" {
			fmt.Fprintf(&b, " %s", st)
		}
		fmt.Fprintf(&b, "  [%s] +%s %s", s.Service, ms(s.Start.Sub(start)), ms(s.End.Sub(s.Start)))
		if s.ParentID != "" && !ids[s.ParentID] {
			fmt.Fprintf(&b, "  (child of %s)", short(s.ParentID))
		}
		for _, l := range s.Links {
			if l.TraceID != id {
				fmt.Fprintf(&b, "  (link to trace %s)", short(l.TraceID))
			}
		}
		if s.Failed {
			b.WriteString("  ERROR")
		}
		b.WriteByte('\n')
		for _, c := range children[s.SpanID] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

func short(id string) string { return id[:min(8, len(id))] }

// startTraceReceiver listens on addr for the services' spans; the server
// ends with done.
func startTraceReceiver(done <-chan struct{}, addr string, out io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("trace receiver: %w", err)
	}
	p := &tracePrinter{out: out}
	srv := &http.Server{Handler: &otlprecv.Receiver{OnSpans: p.add}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-done
		_ = srv.Close()
	}()
	return nil
}
