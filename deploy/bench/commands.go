package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// Commands per operation: what an operation costs the database, counted
// the same way on any store. A service side reads the service's
// mongodb_commands_total; a driver side counts what the bench's own client
// sends (a command monitor), nothing else using that client meanwhile.

// commandCounter counts the commands of the bench's client.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(context.Context, *event.CommandStartedEvent) { c.n.Add(1) }}
}

// read is a side's commands function for the driver sides.
func (c *commandCounter) read() (float64, error) { return float64(c.n.Load()), nil }

// serviceCommands sums every series of mongodb_commands_total on the
// /metrics of the service whose operations listener is at addr.
func serviceCommands(ctx context.Context, addr string) (float64, error) {
	status, _, body, err := get(ctx, http.DefaultClient, "http://"+addr+"/metrics", "")
	if err != nil || status != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: %d %v", addr, status, err)
	}
	var sum float64
	found := false
	for line := range strings.Lines(string(body)) {
		rest, ok := strings.CutPrefix(line, "mongodb_commands_total")
		if !ok || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s/metrics: %q: %w", addr, line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("%s/metrics has no mongodb_commands_total", addr)
	}
	return sum, nil
}

// accountCommands and convCommands are the service sides' commands
// functions: everything the service has sent. The account service's
// background is a reload of its keys a minute; the conversations
// service's pollers (relay, streams, fan-out, deliveries) send tens of
// commands a second, which on the embedded store, at tens of operations a
// second, would be most of a run's, and slow down unevenly when the store
// is busy: its figures come from quietCount instead.
func (s *stack) accountCommands() (float64, error) {
	return serviceCommands(context.Background(), s.accountOps)
}

func (s *stack) convCommands() (float64, error) {
	return serviceCommands(context.Background(), s.convOps)
}

// quietEnv makes the conversations service's pollers wait an hour: a
// change on the replica still wakes its relay and its streams, what its
// relay orders its fan-out, and a delivery it records its delivery
// engine, so what such a replica sends is what the operations cause. Its
// relay leases last an hour too: alone, it takes every partition at
// start, and the renewals (two commands a second at the default lease,
// whatever happens) would count as the operations'.
var quietEnv = []string{"CONVERSATIONS_EVENTS_POLL_INTERVAL=1h", "CONVERSATIONS_WEBHOOK_POLL_INTERVAL=1h", "CONVERSATIONS_RELAY_LEASE=1h"}

// quietCount counts the commands of each side's operations on a quiet
// conversations replica (quietEnv), started on the measure's database
// for one run of each side, and restarts the service as it was after.
// The sides' ratios come from the rounds on the production settings.
func (s *stack) quietCount(ctx context.Context, sides ...side) (out []sample, err error) {
	if err := s.restartConversations(ctx, quietEnv...); err != nil {
		return nil, err
	}
	defer func() {
		if rerr := s.restartConversations(ctx); err == nil {
			err = rerr
		}
	}()
	// The events of the rounds before are ordered first (a quiet replica
	// orders them in its first round, once it holds every partition), and
	// what a start sends (that round, a fan-out, claims) is over once the
	// count stops moving.
	if err := waitPartitions(ctx, []string{s.convOps}); err != nil {
		return nil, err
	}
	if err := s.drainEvents(ctx); err != nil {
		return nil, err
	}
	last := -1.0
	for range 50 {
		c, err := s.convCommands()
		if err != nil {
			return nil, err
		}
		if c == last {
			break
		}
		last = c
		time.Sleep(200 * time.Millisecond)
	}
	for _, sd := range sides {
		sd.commands = s.convCommands
		got, err := runFor(ctx, sd, s.o.serviceRun)
		if err != nil {
			return nil, fmt.Errorf("counting commands: %w", err)
		}
		out = append(out, got)
	}
	return out, nil
}

// restartConversations stops the conversations service and starts it
// again on the same database, with extra added to its environment.
func (s *stack) restartConversations(ctx context.Context, extra ...string) error {
	if s.conv != nil {
		if err := s.conv.Stop(stopTimeout); err != nil {
			return fmt.Errorf("stop conversations: %w", err)
		}
		s.conv = nil
	}
	var err error
	s.conv, err = s.startConversations(ctx, extra...)
	return err
}

// drainEvents waits until no conversation or message of the measure's
// database carries events the relay has not ordered yet. It reads with the
// bench's client, outside any driver side's run.
func (s *stack) drainEvents(ctx context.Context) error {
	db := s.client.Database(s.convDB)
	pending := bson.D{{Key: "pending_since", Value: bson.D{{Key: "$gt", Value: time.Unix(0, 0).UTC()}}}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		n := int64(0)
		for _, coll := range []string{"conversations", "messages"} {
			c, err := db.Collection(coll).CountDocuments(ctx, pending)
			if err != nil {
				return err
			}
			n += c
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d documents still carry pending events: %w", n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// postSide is a side that posts for its run and then waits until the
// relay has ordered the posts' events, so that a count of its commands
// (on a quiet replica, which has ordered every event before: see
// quietCount) holds the relay's share. In the alternating rounds the
// relay orders both sides' events whenever it gets to them, so the
// commands of a service side's run are not its posts'.
func (s *stack) postSide(post func(context.Context, int) error) side {
	return side{name: "posts, then the relay", run: func(ctx context.Context, d time.Duration) (int64, time.Duration, error) {
		ops, elapsed, err := runWorkers(ctx, side{workers: s.o.workers, op: post}, until(d))
		if err == nil {
			err = s.drainEvents(ctx)
		}
		return ops, elapsed, err
	}}
}

// cmdsCell is the table's commands per operation of the measured side and
// of the reference side: the median over the rounds, "–" for a side that
// sends none of its own (a bare computation).
func cmdsCell(ours, reference []sample) string {
	return cmdsOf(ours) + " / " + cmdsOf(reference)
}

func cmdsOf(samples []sample) string {
	if len(samples) == 0 || !samples[0].counted {
		return "–"
	}
	return fmt.Sprintf("%.2f", medianOf(samples, sample.commandsPerOp))
}

// The minimum commands of the operations judged by them (see costModel).
const (
	// postMinimum: a post without an Idempotency-Key reads the
	// conversation, inserts the message with its event, and sets the
	// conversation conditional on its version (3); the relay appends the
	// event to the log and clears it from the message (2).
	postMinimum = 5
	// postTolerance allows the relay's reads of a round (3), shared by
	// the round's events, up to 1 a post: one command more per post fails.
	postTolerance = 1.2
	// deliveryBatchCommands: a batch of deliveries costs the due read, the
	// claims (one bulk write), the endpoints' read and the outcomes (one
	// bulk write).
	deliveryBatchCommands = 4
	// deliveryTolerance allows batches of half the engine's slots on
	// average.
	deliveryTolerance = 2.0
)

// costModel is the part of the generated document that says how the
// commands per operation are counted and what the judged rows' minimums
// are; workers is the bench's, of which the delivery engine's slots
// follow.
func costModel(workers int) string {
	slots := workers * benchPerEndpoint
	return fmt.Sprintf(`### Commands per operation

The column "cmds/op (ours / reference)" is the database commands of one operation on each side: a cost that holds on any store, where the embedded one cannot settle a latency ratio (it scans every filter but _id). The reference side's count is what the bench's own client sent during its runs (a command monitor); "–" is a side that sends none (a bare computation). The measured side's count is the service's mongodb_commands_total, read before and after a run: for the account service, over the rounds (its background is a reload of its keys a minute); for the conversations service, on a quiet replica, started again on the measure's database after the rounds for one run of each counted side with CONVERSATIONS_EVENTS_POLL_INTERVAL, CONVERSATIONS_WEBHOOK_POLL_INTERVAL and CONVERSATIONS_RELAY_LEASE of 1 h (the replica, alone, takes every relay partition at start; their renewals, about a command a second at the default lease, would otherwise count). Its pollers (relay, streams, fan-out, deliveries) send tens of commands a second with nothing happening, as many as the operations' own on the embedded store, and fewer when the store is busy, so that neither counting them nor subtracting their idle rate gives the operations' figure; on the quiet replica a change still wakes the relay, what the relay orders the fan-out, and a recorded delivery the delivery engine, so what it sends is what the operations cause. Counted there, posts are followed until the relay has ordered their events.

Two rows are judged by their commands against the fewest their design allows (and by their ratio as well when the store is MongoDB):

- **Message post with its event**: **%d** a post. On the request 3: the conversation read with the caller's filter, the message inserted with its pending message.created, the conversation set conditional on the version read. By the relay 2 an event: its append to the account's log, its clearing from the message. The relay's reads of a round (the documents with pending events, of conversations and of messages, and the account's newest sequence: 3) are shared by the events the round orders and are not in the minimum; the target of %.1f × (%.1f) allows them up to one command a post, i.e. rounds of 3 events or more on average, while one command more on the request fails. With an Idempotency-Key a post adds its claim (a find-and-modify) and the saved response (an update): 7; the bench posts without. The post with 3 endpoints subscribed is counted the same way, and so holds the fan-out its events cause (the replica whose relay orders them fans them out at once) and what of their deliveries is made within the run.
- **Webhook deliveries**: **%d/%d = %.2f** a delivery. A batch of claims costs the read of the due deliveries, one bulk write of their conditional claims and the read of their endpoints, and a batch of outcomes one bulk write: %d commands, over the engine's %d slots here (%d endpoints × %d in flight each) when every batch fills them. The target of %.0f × (%.2f) holds batches of half the slots on average, or full batches with one more read each: a claim reads up to twice its free slots of the deliveries due longest ago, and when that many are due (the round's backlog, all of endpoints the claim then fills) it reads again at once, for other endpoints' due deliveries behind them, which finds none here. Counted over one round of deliveries on the quiet replica, with the test delivery (POST /v1/webhooks/{id}/test) that wakes its engine counted as one of them.
`,
		postMinimum, postTolerance, postMinimum*postTolerance,
		deliveryBatchCommands, slots, float64(deliveryBatchCommands)/float64(slots), deliveryBatchCommands, slots, workers, benchPerEndpoint,
		deliveryTolerance, float64(deliveryBatchCommands)/float64(slots)*deliveryTolerance)
}

// postTarget is the messages post row's target: commands on any store,
// and the latency ratio on MongoDB only.
func postTarget(mongo bool) string {
	t := fmt.Sprintf("≤ %.1f cmds/op (%.1f × the minimum %d)", postMinimum*postTolerance, postTolerance, postMinimum)
	if mongo {
		t += "; ≥ 0.80 × driver"
	}
	return t
}

// deliveryTarget is the deliveries row's target: commands on any store,
// and the throughput ratio on MongoDB only.
func deliveryTarget(minimum float64, slots int, mongo bool) string {
	t := fmt.Sprintf("≤ %.2f cmds/op (%.1f × the minimum %d/%d)", minimum*deliveryTolerance, float64(deliveryTolerance), deliveryBatchCommands, slots)
	if mongo {
		t += "; ≥ 0.7 × bare"
	}
	return t
}
