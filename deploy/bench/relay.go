package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/deploy/internal/svcproc"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/mongostore"
)

// relayWriters post at once in the relay measure, spread over the
// replicas (two per replica with three), each a message every relayPace:
// 30 a second together, below what the embedded store takes (about 60
// posts a second), so that the latency is the relay's, not a queue's.
const (
	relayWriters = 6
	relayPace    = 200 * time.Millisecond
)

// relayMessages is how many messages each writer of the relay measure
// posts: a quarter of -changes (50 by default: 300 events per
// configuration, which the embedded store orders in minutes).
func relayMessages(o benchOptions) int { return max(1, o.changes/4) }

// relayRun is what one configuration of the relay measure gave.
type relayRun struct {
	replicas         int
	p50, p99         time.Duration
	events           float64 // ordered: the messages posted, each read in the log
	commands         float64 // sent by all replicas during the load
	commandsPerEvent float64
	byName           string        // the commands, by name
	took             time.Duration // from the first post to the last event counted
}

// relayRows measures the relay with one and with three replicas on one
// store, under the same load: relayWriters writers post relayMessages
// each, one every relayPace, spread over the replicas, and the bench reads
// the account's log through the driver (the find GET /v1/events makes,
// outside the replicas, so that the reading costs them no command). Each
// configuration runs on a fresh database. Reported: change → event in the
// log, p50 and p99; and the database commands of all replicas during the
// load (mongodb_commands_total) per event ordered.
func relayRows(ctx context.Context, s *stack) ([]row, error) {
	// The service's own webhook polls (the stack's are every 100 ms, for
	// the webhooks measure): a replica's fixed cost counts here.
	env := s.convEnv
	defer func() { s.convEnv = env }()
	s.convEnv = append(slices.Clone(env), "CONVERSATIONS_WEBHOOK_POLL_INTERVAL=1s")
	var runs []relayRun
	for _, n := range []int{1, 3} {
		if err := s.freshConversations(ctx, fmt.Sprintf("relay%d", n)); err != nil {
			return nil, err
		}
		r, err := s.relayRun(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("relay with %d replicas: %w", n, err)
		}
		runs = append(runs, r)
		fmt.Fprintln(os.Stderr, "  "+describeRelayRun(r)) // kept should the next run fail
	}
	one, three := runs[0], runs[1]
	describe := describeRelayRun
	latency := float64(three.p99) / float64(max(one.p99, time.Microsecond))
	cost := three.commandsPerEvent / max(one.commandsPerEvent, 1e-9)
	load := fmt.Sprintf("%d writers × %d messages, one every %v each, spread over the replicas", relayWriters, relayMessages(s.o), relayPace)
	return []row{{
		measure: "Relay: a message posted → its event in the log (read as the feed reads it), 3 replicas vs 1 on one store, " + load,
		subject: describe(three), against: describe(one),
		ratio: spread{median: latency, min: latency, max: latency, n: 1}, unit: "× 1 replica (p99)",
		target: "≤ 1.20", hasGoal: true, met: latency <= 1.2, id: "relay",
	}, {
		measure: "Relay: database commands of all replicas per event ordered, 3 replicas vs 1, " + load,
		subject: fmt.Sprintf("%.1f per event with 3 replicas", three.commandsPerEvent),
		against: fmt.Sprintf("%.1f with 1", one.commandsPerEvent),
		ratio:   spread{median: cost, min: cost, max: cost, n: 1}, unit: "× 1 replica",
		target: "≤ 1.10", hasGoal: true, met: cost <= 1.1, id: "relay",
	}}, nil
}

func describeRelayRun(r relayRun) string {
	return fmt.Sprintf("%d replica(s): p50 %s, p99 %s; %.1f commands per event (%.0f in %s for %.0f events: %s)",
		r.replicas, r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond), r.commandsPerEvent,
		r.commands, r.took.Round(100*time.Millisecond), r.events, r.byName)
}

// relayRun starts n-1 replicas beside s.conv, runs the load through all n
// and stops the ones it started.
func (s *stack) relayRun(ctx context.Context, n int) (relayRun, error) {
	out := relayRun{replicas: n}
	urls, ops, stop, err := s.startReplicas(ctx, n)
	defer stop()
	if err != nil {
		return out, err
	}
	client := loopbackClient(relayWriters)
	bearer, accountID, convs, after, err := s.writersConversations(ctx, client)
	if err != nil {
		return out, err
	}
	commands0, err := commandsByName(ctx, ops)
	if err != nil {
		return out, err
	}
	began := time.Now()
	ordered0, err := sumMetrics(ctx, ops, "conversations_events_ordered_total")
	if err != nil {
		return out, err
	}

	var (
		mu      sync.Mutex
		started = map[string]time.Time{}
		took    []time.Duration
	)
	errs, writersDone := pacedPosts(ctx, client, bearer, urls, convs, relayMessages(s.o), func(id string, start time.Time) {
		mu.Lock()
		started[id] = start
		mu.Unlock()
	})
	total := relayWriters * relayMessages(s.o)
	events := s.client.Database(s.convDB).Collection("events")
	pending := map[string]time.Time{} // read before its POST answered
	for len(took) < total {
		select {
		case err := <-errs:
			return out, err
		case <-ctx.Done():
			return out, ctx.Err()
		default:
		}
		cur, err := events.Find(ctx, bson.D{{Key: "account_id", Value: accountID}, {Key: "sequence", Value: bson.D{{Key: "$gt", Value: after}}}},
			options.Find().SetSort(bson.D{{Key: "sequence", Value: 1}}).SetLimit(1000).SetHint("by_sequence"))
		if err != nil {
			return out, err
		}
		var docs []mongostore.EventDocument
		if err := cur.All(ctx, &docs); err != nil {
			return out, err
		}
		now := time.Now()
		for _, d := range docs {
			after = d.Sequence
			var data struct {
				Message *struct {
					ID string `json:"id"`
				} `json:"message"`
			}
			if json.Unmarshal([]byte(d.Data), &data) == nil && data.Message != nil {
				pending[data.Message.ID] = now
			}
		}
		mu.Lock()
		for id, at := range pending {
			if start, ok := started[id]; ok {
				took = append(took, at.Sub(start))
				delete(pending, id)
			}
		}
		mu.Unlock()
		if len(docs) == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	<-writersDone
	// A relay counts what it ordered when its round ends: wait for the
	// rounds in flight (an event whose insert answered late, and was
	// skipped as copied by the next round, is counted by nobody).
	ordered1, err := sumMetrics(ctx, ops, "conversations_events_ordered_total")
	for last := time.Now(); err == nil && ordered1 < ordered0+float64(total) && time.Since(last) < 2*time.Second; {
		time.Sleep(10 * time.Millisecond)
		var now float64
		if now, err = sumMetrics(ctx, ops, "conversations_events_ordered_total"); now > ordered1 {
			ordered1, last = now, time.Now()
		}
	}
	if err != nil {
		return out, err
	}
	out.took = time.Since(began)
	if out.commands, out.byName, err = commandsSince(ctx, ops, commands0); err != nil {
		return out, err
	}
	slices.Sort(took)
	q := func(f float64) time.Duration { return took[min(len(took)-1, int(f*float64(len(took))))] }
	out.p50, out.p99 = q(0.5), q(0.99)
	// Every message has exactly one event in the log (read above).
	out.events = float64(total)
	out.commandsPerEvent = out.commands / out.events
	return out, nil
}

// writersConversations logs the bench's first user in and creates a
// conversation for each of the relay measure's writers. It returns the
// user's token and account, the conversations, and the newest sequence of
// the account's log once their creations are ordered.
func (s *stack) writersConversations(ctx context.Context, client *http.Client) (bearer, accountID string, convs []string, after int64, err error) {
	if bearer, err = s.login(ctx, client, 0); err != nil {
		return
	}
	claims, err := jwtClaims(bearer)
	if err != nil {
		return
	}
	accountID, _ = claims["account_id"].(string)
	convs = make([]string, relayWriters)
	for w := range convs {
		if convs[w], err = s.createConversation(ctx, client, bearer, fmt.Sprint("Bench relay ", w)); err != nil {
			return
		}
	}
	after, err = s.logTail(ctx, accountID, 0, relayWriters)
	return
}

// pacedPosts starts the relay measure's writers, one per conversation of
// convs: each posts messages messages, one every relayPace, through
// urls[w%len(urls)], and calls posted with each message's id and when its
// POST started. A writer that fails sends its error on errs; done closes
// when every writer has ended.
func pacedPosts(ctx context.Context, client *http.Client, bearer string, urls, convs []string, messages int,
	posted func(id string, start time.Time)) (errs <-chan error, done <-chan struct{}) {
	failed := make(chan error, len(convs))
	ended := make(chan struct{})
	var writers sync.WaitGroup
	for w := range convs {
		writers.Go(func() {
			target := urls[w%len(urls)] + messagesPath(convs[w])
			time.Sleep(time.Duration(w) * relayPace / time.Duration(len(convs))) // spread over the pace
			tick := time.NewTicker(relayPace)
			defer tick.Stop()
			for range messages {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				start := time.Now()
				status, body, err := postWithBearer(ctx, client, bearer, target, []byte(`{"body":"relay"}`))
				if err != nil || status != http.StatusCreated {
					failed <- fmt.Errorf("post message: %d %.200s %v", status, body, err)
					return
				}
				var m struct {
					ID string `json:"id"`
				}
				_ = json.Unmarshal(body, &m)
				posted(m.ID, start)
			}
		})
	}
	go func() { writers.Wait(); close(ended) }()
	return failed, ended
}

// startReplicas starts n-1 conversations replicas beside s.conv on its
// database and waits until they share the relay's partitions out. It
// returns the API and operations addresses of all n, and stop, which
// stops the ones it started (also after an error).
func (s *stack) startReplicas(ctx context.Context, n int) (urls, ops []string, stop func(), err error) {
	urls, ops = []string{s.convURL}, []string{s.convOps}
	var started []*svcproc.Process
	stop = func() {
		for _, p := range started {
			_ = p.Stop(stopTimeout)
		}
	}
	for range n - 1 {
		addr, err := svcproc.FreeAddr()
		if err != nil {
			return nil, nil, stop, err
		}
		opsAddr, err := svcproc.FreeAddr()
		if err != nil {
			return nil, nil, stop, err
		}
		env := append(slices.Clone(s.convEnv), "CONVERSATIONS_HTTP_ADDR="+addr, "CONVERSATIONS_OPS_ADDR="+opsAddr)
		p, err := svcproc.Start(ctx, filepath.Join(s.bin, "conversations"), env, opsAddr, readyTimeout)
		if err != nil {
			return nil, nil, stop, err
		}
		started = append(started, p)
		urls, ops = append(urls, "http://"+addr), append(ops, opsAddr)
	}
	return urls, ops, stop, waitPartitions(ctx, ops)
}

// logTail waits until the account's log holds at least want events after
// after and returns the newest sequence.
func (s *stack) logTail(ctx context.Context, accountID string, after int64, want int) (int64, error) {
	events := s.client.Database(s.convDB).Collection("events")
	for {
		n, err := events.CountDocuments(ctx, bson.D{{Key: "account_id", Value: accountID}, {Key: "sequence", Value: bson.D{{Key: "$gt", Value: after}}}})
		if err != nil {
			return 0, err
		}
		if n >= int64(want) {
			var d mongostore.EventDocument
			err := events.FindOne(ctx, bson.D{{Key: "account_id", Value: accountID}},
				options.FindOne().SetSort(bson.D{{Key: "sequence", Value: -1}})).Decode(&d)
			return d.Sequence, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitPartitions waits until the replicas listening on ops lease every
// relay partition between them, none more than its share.
func waitPartitions(ctx context.Context, ops []string) error {
	for {
		var held []float64
		for _, o := range ops {
			v, err := sumMetrics(ctx, []string{o}, "conversations_relay_partitions_held")
			if err != nil {
				return err
			}
			held = append(held, v)
		}
		total := 0.0
		for _, h := range held {
			total += h
		}
		const count = conversations.DefaultRelayPartitions
		if total == count && slices.Max(held) <= float64((count+len(ops)-1)/len(ops)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("partitions held %v: %w", held, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// commandsByName is mongodb_commands_total of the processes listening on
// ops, summed per command name.
func commandsByName(ctx context.Context, ops []string) (map[string]float64, error) {
	series, err := metricSeries(ctx, ops, "mongodb_commands_total")
	out := map[string]float64{}
	for labels, v := range series {
		name, _ := strings.CutPrefix(labels, `command="`)
		out[strings.TrimSuffix(name, `"`)] += v
	}
	return out, err
}

// commandsSince is the commands of the processes listening on ops since
// commandsByName read before: in all, and by name ("find 12, insert 3").
func commandsSince(ctx context.Context, ops []string, before map[string]float64) (float64, string, error) {
	now, err := commandsByName(ctx, ops)
	if err != nil {
		return 0, "", err
	}
	total := 0.0
	var names []string
	for name, n := range now {
		if d := n - before[name]; d > 0 {
			total += d
			names = append(names, fmt.Sprintf("%s %.0f", name, d))
		}
	}
	slices.Sort(names)
	return total, strings.Join(names, ", "), nil
}

// sumMetrics adds up every series of the metric name on the processes
// listening on ops.
func sumMetrics(ctx context.Context, ops []string, name string) (float64, error) {
	series, err := metricSeries(ctx, ops, name)
	total := 0.0
	for _, v := range series {
		total += v
	}
	return total, err
}

// metricSeries reads the series of the metric name on the processes
// listening on ops, each summed over them by its labels ("" for none).
func metricSeries(ctx context.Context, ops []string, name string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, o := range ops {
		status, _, body, err := get(ctx, http.DefaultClient, "http://"+o+"/metrics", "")
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("GET %s/metrics: %d %v", o, status, err)
		}
		for line := range strings.Lines(string(body)) {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || rest == "" || rest[0] != ' ' && rest[0] != '{' {
				continue
			}
			labels, value := "", strings.TrimSpace(rest)
			if rest[0] == '{' {
				labels, value, _ = strings.Cut(rest[1:], "} ")
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q", o, line)
			}
			out[labels] += v
		}
	}
	return out, nil
}
