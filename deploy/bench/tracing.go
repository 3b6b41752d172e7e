package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/acme/platform/deploy/internal/otlprecv"
	"github.com/acme/platform/deploy/internal/svcproc"
)

// tracingRows measures what tracing costs the conversations service: the
// first page of the listing and a message post, on three replicas of one
// database side by side: tracing on (every request sampled, spans
// exported over OTLP/HTTP to a receiver in this process that decodes
// them), tracing configured off (no OTEL_* variable: the default of
// every deployment), and a baseline built with the notracing tag, which
// has no tracing at all.
func tracingRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	baseline, err := buildWithoutTracing(ctx)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(filepath.Dir(baseline))

	var received atomic.Int64
	recv := &otlprecv.Receiver{Discard: true, OnSpans: func(spans []otlprecv.Span) { received.Add(int64(len(spans))) }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	collector := &http.Server{Handler: recv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = collector.Serve(ln) }()
	defer collector.Close()

	traced, err := s.replica(ctx, filepath.Join(s.bin, "conversations"),
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+ln.Addr().String(), "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_SAMPLER=always_on")
	if err != nil {
		return nil, err
	}
	defer traced.stop()
	base, err := s.replica(ctx, baseline)
	if err != nil {
		return nil, err
	}
	defer base.stop()
	off := replica{url: s.convURL}

	client := loopbackClient(o.workers)
	bearer, err := s.login(ctx, client, 2%o.workers)
	if err != nil {
		return nil, err
	}
	// Each worker posts to a conversation of its own (see messagesRows).
	posted := make([]string, o.workers)
	for w := range posted {
		if posted[w], err = s.createConversation(ctx, client, bearer, fmt.Sprintf("Bench tracing %d", w)); err != nil {
			return nil, err
		}
	}
	list := func(r replica) func(context.Context, int) error {
		url := r.url + "/v1/conversations"
		return func(ctx context.Context, _ int) error {
			status, _, body, err := get(ctx, client, url, bearer)
			if err == nil && status != http.StatusOK {
				err = fmt.Errorf("GET %s answered %d: %s", url, status, body)
			}
			return err
		}
	}
	postBody := []byte(`{"body":"` + benchMessageBody + `"}`)
	post := func(r replica) func(context.Context, int) error {
		return func(ctx context.Context, w int) error {
			url := r.url + messagesPath(posted[w])
			status, body, err := postWithBearer(ctx, client, bearer, url, postBody)
			if err == nil && status != http.StatusCreated {
				err = fmt.Errorf("POST %s answered %d: %s", url, status, body)
			}
			return err
		}
	}

	var rows []row
	for _, m := range []struct {
		name string
		op   func(replica) func(context.Context, int) error
	}{
		{"GET /v1/conversations", list},
		{"POST /v1/conversations/{id}/messages", post},
	} {
		samples, err := alternate(ctx, o.rounds, o.serviceRun,
			side{name: m.name + " traced", workers: o.workers, op: m.op(traced)},
			side{name: m.name + " off", workers: o.workers, op: m.op(off)},
			side{name: m.name + " baseline", workers: o.workers, op: m.op(base)},
		)
		if err != nil {
			return nil, fmt.Errorf("tracing, %s: %w", m.name, err)
		}
		on, configuredOff, bare := samples[0], samples[1], samples[2]
		perSecond := func(s []sample) string { return thousands(medianOf(s, sample.perSecond)) + "/s" }
		onRatio := ratios(on, configuredOff, throughputRatio)
		offRatio := ratios(configuredOff, bare, throughputRatio)
		rows = append(rows,
			row{
				measure: fmt.Sprintf("Tracing on: %s, every request sampled and exported, vs tracing off, %d concurrent", m.name, o.workers),
				subject: perSecond(on) + " with tracing on", against: perSecond(configuredOff) + " with tracing configured off",
				ratio: onRatio, unit: "× off", target: "≥ 0.90", hasGoal: true, met: onRatio.median >= 0.90, id: "tracing",
			},
			row{
				measure: fmt.Sprintf("Tracing configured off: %s vs a build without tracing, %d concurrent", m.name, o.workers),
				subject: perSecond(configuredOff) + " with tracing configured off", against: perSecond(bare) + " built with -tags notracing",
				ratio: offRatio, unit: "× no tracing", target: "≥ 0.98", hasGoal: true, met: offRatio.median >= 0.98, id: "tracing",
			},
		)
	}
	// The exporter sends a batch every 5 s (OTEL_BSP_SCHEDULE_DELAY's
	// default): a short run may end before the first.
	for wait := time.Now(); received.Load() == 0 && time.Since(wait) < 15*time.Second; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if received.Load() == 0 {
		return nil, fmt.Errorf("tracing: the traced replica exported no span")
	}
	rows[0].notes = fmt.Sprintf("%d spans received and decoded by the loopback OTLP/HTTP receiver.", received.Load())
	return rows, nil
}

// replica is a conversations process of a measure beside the stack's.
type replica struct {
	url  string
	proc *svcproc.Process
}

func (r replica) stop() {
	if r.proc != nil {
		_ = r.proc.Stop(stopTimeout)
	}
}

// replica starts bin as another conversations replica of the stack's
// database, on addresses of its own, with extra added to its environment.
func (s *stack) replica(ctx context.Context, bin string, extra ...string) (replica, error) {
	api, err := svcproc.FreeAddr()
	if err != nil {
		return replica{}, err
	}
	ops, err := svcproc.FreeAddr()
	if err != nil {
		return replica{}, err
	}
	env := slices.DeleteFunc(slices.Clone(s.convEnv), func(kv string) bool {
		return strings.HasPrefix(kv, "CONVERSATIONS_HTTP_ADDR=") || strings.HasPrefix(kv, "CONVERSATIONS_OPS_ADDR=")
	})
	env = append(env, "CONVERSATIONS_HTTP_ADDR="+api, "CONVERSATIONS_OPS_ADDR="+ops)
	p, err := svcproc.Start(ctx, bin, append(env, extra...), ops, readyTimeout)
	if err != nil {
		return replica{}, err
	}
	return replica{url: "http://" + api, proc: p}, nil
}

// buildWithoutTracing builds the conversations binary with the notracing
// tag into a temporary folder and returns its path.
func buildWithoutTracing(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "bench-notracing")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "conversations")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", "notracing", "-o", bin,
		"github.com/acme/platform/services/conversations/cmd/conversations")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("build conversations -tags notracing: %w\n%s", err, out)
	}
	return bin, nil
}
