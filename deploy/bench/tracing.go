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
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/deploy/internal/otlprecv"
	"github.com/acme/platform/deploy/internal/svcproc"
)

// tracingRows measures what tracing costs the conversations service: the
// first page of the listing and a message post, through HTTP, on three
// replicas side by side: tracing on (every request sampled, spans
// exported over OTLP/HTTP to a receiver in this process that counts
// them: a collector would run on a machine of its own, so the receiver
// does no more than walk the protobuf to count, and leaves the cores to
// the service measured), tracing configured off (no OTEL_* variable:
// the default of every deployment), and a baseline built with the
// notracing tag, which has no tracing at all. Each replica has a database of its own, holding
// what the others' hold, and the sides run interleaved in mirrored blocks
// (see interleave and mirrored), every run the same number of operations.
//
// Posts need more: on the embedded store every query but one by _id reads
// the whole collection, so the relay, which orders each post's event,
// slows down as the collections grow and, several times slower than the
// posts, falls ever further behind them; on a shared database each side
// paid for the others' posts and backlog. So each block of posts starts three fresh replicas on three
// fresh databases, and after every run the bench waits, untimed, until
// that replica's relay has ordered the run's events: every run of every
// side starts from the same collections with no backlog. Timing the wait
// would measure the store's pace of ordering and hide what tracing costs a
// request.
func tracingRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	baseline, err := buildWithoutTracing(ctx)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(filepath.Dir(baseline))

	var received atomic.Int64
	recv := &otlprecv.Receiver{Discard: true, Count: func(spans int) { received.Add(int64(spans)) }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	collector := &http.Server{Handler: recv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = collector.Serve(ln) }()
	defer collector.Close()

	// The stack's replica would poll its own database beside the three:
	// stopped (the next measure starts it again).
	if err := s.conv.Stop(stopTimeout); err != nil {
		return nil, fmt.Errorf("stop conversations: %w", err)
	}
	s.conv = nil
	client := loopbackClient(o.workers)
	bearer, err := s.login(ctx, client, 2%o.workers)
	if err != nil {
		return nil, err
	}
	t := &tracingSides{s: s, client: client, bearer: bearer, sides: []tracingSide{
		{name: "tracing on", bin: filepath.Join(s.bin, "conversations"), env: []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + ln.Addr().String(), "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
			"OTEL_TRACES_SAMPLER=always_on"}},
		{name: "tracing configured off", bin: filepath.Join(s.bin, "conversations")},
		{name: "built without tracing", bin: baseline},
	}}

	if err := t.start(ctx, "list"); err != nil {
		t.stop(ctx)
		return nil, err
	}
	// Twice the blocks, each run half as long: a neighbour's burst of
	// a second or two falls into fewer runs, and the median of ten
	// blocks stands on more.
	listSamples, err := interleave(ctx, 2*o.rounds, o.serviceRun/2, nil, t.list()...)
	if err == nil {
		err = t.profile(ctx, "listing", t.list())
	}
	t.stop(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing, GET /v1/conversations: %w", err)
	}

	postSamples := make([][]sample, len(t.sides))
	var perPostRun int64
	for b := range o.rounds {
		err := t.start(ctx, fmt.Sprint("post", b))
		if err == nil {
			// The first posts of a fresh replica open its connections to
			// the store: a warm-up of listings, which change nothing,
			// does that for every side alike.
			for i, sd := range t.list() {
				if _, err = runN(ctx, sd, int64(4*o.workers)); err == nil {
					err = t.relayed(ctx, i) // the conversations' events
				}
				if err != nil {
					break
				}
			}
		}
		var got []sample
		if err == nil {
			perPostRun = int64(o.tracingPosts * o.workers)
			got, err = mirrored(ctx, perPostRun, b, t.relayed, t.post()...)
		}
		if err == nil && b == o.rounds-1 {
			err = t.profile(ctx, "post", t.post())
		}
		t.stop(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing, POST /v1/conversations/{id}/messages, block %d: %w", b+1, err)
		}
		for k := range got {
			postSamples[k] = append(postSamples[k], got[k])
		}
	}

	var rows []row
	for _, m := range []struct {
		name    string
		samples [][]sample
		notes   string
	}{
		{"GET /v1/conversations", listSamples, fmt.Sprintf("%d pages per run", listSamples[0][0].ops/2)},
		{"POST /v1/conversations/{id}/messages", postSamples,
			fmt.Sprintf("%d posts per run, on fresh databases every block, each run's events ordered before the next run", perPostRun)},
	} {
		on, configuredOff, bare := m.samples[0], m.samples[1], m.samples[2]
		perSecond := func(s []sample) string {
			cpu := time.Duration(medianOf(s, func(s sample) float64 { return float64(s.cpuPerOp()) }))
			return fmt.Sprintf("%s/s (%s CPU of the replica each)", thousands(medianOf(s, sample.perSecond)), cpu.Round(time.Microsecond))
		}
		onRatio := ratios(on, configuredOff, throughputRatio)
		offRatio := ratios(configuredOff, bare, throughputRatio)
		rows = append(rows,
			row{
				measure: fmt.Sprintf("Tracing on: %s, every request sampled and exported, vs tracing off, %d concurrent, interleaved", m.name, o.workers),
				subject: perSecond(on) + " with tracing on", against: perSecond(configuredOff) + " with tracing configured off",
				ratio: onRatio, unit: "× off", target: "≥ 0.90", hasGoal: true, met: onRatio.median >= 0.90, id: "tracing",
				notes: m.notes,
			},
			row{
				measure: fmt.Sprintf("Tracing configured off: %s vs a build without tracing, %d concurrent, interleaved", m.name, o.workers),
				subject: perSecond(configuredOff) + " with tracing configured off", against: perSecond(bare) + " built with -tags notracing",
				ratio: offRatio, unit: "× no tracing", target: "≥ 0.98", hasGoal: true, met: offRatio.median >= 0.98, id: "tracing",
				notes: m.notes,
			},
		)
	}
	if received.Load() == 0 {
		return nil, fmt.Errorf("tracing: the traced replica exported no span")
	}
	rows[0].notes += fmt.Sprintf("; %d spans received and counted by the loopback OTLP/HTTP receiver", received.Load())
	return rows, nil
}

// tracingSide is one side of the tracing measure: a binary and its
// environment, and while started its replica and database.
type tracingSide struct {
	name, bin string
	env       []string
	db        string
	r         replica
	posted    []string // a conversation per worker
}

// tracingSides are the tracing measure's three sides and what their
// requests share.
type tracingSides struct {
	s      *stack
	client *http.Client
	bearer string
	sides  []tracingSide
}

// start starts every side's replica on a fresh database (named by
// suffix) and creates its conversations, one per worker. After an error,
// stop stops what started.
func (t *tracingSides) start(ctx context.Context, suffix string) error {
	for i := range t.sides {
		sd := &t.sides[i]
		sd.db = t.s.convDB + "_" + suffix + "_" + strconv.Itoa(i)
		t.s.dropAtClose(sd.db)
		var err error
		if sd.r, err = t.s.replica(ctx, sd.bin, sd.db, sd.env...); err != nil {
			return err
		}
		sd.posted = make([]string, t.s.o.workers)
		for w := range sd.posted {
			if sd.posted[w], err = createConversation(ctx, t.client, sd.r.url, t.bearer, fmt.Sprintf("Bench tracing %d", w)); err != nil {
				return err
			}
		}
	}
	return nil
}

// stop stops the replicas (the traced one exports what it holds) and
// drops their databases, so that the store carries no more than the
// next block's.
func (t *tracingSides) stop(ctx context.Context) {
	for i := range t.sides {
		sd := &t.sides[i]
		sd.r.stop()
		sd.r = replica{}
		if sd.db != "" {
			_ = t.s.client.Database(sd.db).Drop(ctx)
		}
	}
}

// profile records a CPU profile of the replica with tracing on and of the
// one with tracing configured off while their sides run (with -profile).
func (t *tracingSides) profile(ctx context.Context, name string, sides []side) error {
	for i := range 2 {
		file := "tracing-" + name + "-" + strings.ReplaceAll(t.sides[i].name, " ", "-")
		if err := t.s.profile(ctx, t.sides[i].r.proc, sides[i], file); err != nil {
			return err
		}
	}
	return nil
}

// list is the first page of the listing on each side.
func (t *tracingSides) list() []side {
	sides := make([]side, len(t.sides))
	for i, sd := range t.sides {
		url := sd.r.url + "/v1/conversations"
		sides[i] = side{name: "GET /v1/conversations, " + sd.name, workers: t.s.o.workers, cpu: sd.r.proc.CPUTime, op: func(ctx context.Context, _ int) error {
			status, _, body, err := get(ctx, t.client, url, t.bearer)
			if err == nil && status != http.StatusOK {
				err = fmt.Errorf("GET %s answered %d: %s", url, status, body)
			}
			return err
		}}
	}
	return sides
}

// post is a message post on each side, each worker to its conversation.
func (t *tracingSides) post() []side {
	body := []byte(`{"body":"` + benchMessageBody + `"}`)
	sides := make([]side, len(t.sides))
	for i, sd := range t.sides {
		sides[i] = side{name: "POST /v1/conversations/{id}/messages, " + sd.name, workers: t.s.o.workers, cpu: sd.r.proc.CPUTime, op: func(ctx context.Context, w int) error {
			url := sd.r.url + messagesPath(sd.posted[w])
			status, resp, err := postWithBearer(ctx, t.client, t.bearer, url, body)
			if err == nil && status != http.StatusCreated {
				err = fmt.Errorf("POST %s answered %d: %s", url, status, resp)
			}
			return err
		}}
	}
	return sides
}

// relayed waits until side i's relay has ordered every event its
// database holds pending.
func (t *tracingSides) relayed(ctx context.Context, i int) error {
	return t.s.noPending(ctx, t.sides[i].db)
}

// noPending waits (at most two minutes) until no document of the
// conversations database db holds a pending event: the relay has ordered
// every change made so far.
func (s *stack) noPending(ctx context.Context, db string) error {
	pending := bson.D{{Key: "pending_since", Value: bson.D{{Key: "$exists", Value: true}}}}
	d := s.client.Database(db)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var n int64
		for _, coll := range []string{"messages", "conversations"} {
			c, err := d.Collection(coll).CountDocuments(ctx, pending, options.Count().SetLimit(1))
			if err != nil {
				return err
			}
			n += c
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("events still pending in %s after two minutes", db)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
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

// replica starts bin as a conversations replica of the database db (the
// stack's, or one of its own), on addresses of its own, with extra added
// to its environment.
func (s *stack) replica(ctx context.Context, bin, db string, extra ...string) (replica, error) {
	api, err := svcproc.FreeAddr()
	if err != nil {
		return replica{}, err
	}
	ops, err := svcproc.FreeAddr()
	if err != nil {
		return replica{}, err
	}
	env := slices.DeleteFunc(slices.Clone(s.convEnv), func(kv string) bool {
		return strings.HasPrefix(kv, "CONVERSATIONS_HTTP_ADDR=") || strings.HasPrefix(kv, "CONVERSATIONS_OPS_ADDR=") ||
			strings.HasPrefix(kv, "CONVERSATIONS_MONGODB_DATABASE=")
	})
	env = append(env, "CONVERSATIONS_HTTP_ADDR="+api, "CONVERSATIONS_OPS_ADDR="+ops, "CONVERSATIONS_MONGODB_DATABASE="+db)
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
