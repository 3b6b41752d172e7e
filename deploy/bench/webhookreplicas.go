package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// replicaEndpoints are the endpoints subscribed in the webhook replicas
// measure, each to every event type.
const replicaEndpoints = 3

// webhookRun is what one configuration of the webhook replicas measure
// gave.
type webhookRun struct {
	replicas           int
	deliveries         float64 // 2xx at the receiver during the load
	commands           float64 // sent by all replicas during the load
	commandsPerDeliver float64
	byName             string
	took               time.Duration
	idlePerSecond      float64 // commands of all replicas a second before the load
}

// webhookReplicaRows measures webhook fan-out and delivery with one and
// with three replicas on one store, as relayRows does the relay: the
// relay's writers post through all replicas while replicaEndpoints
// endpoints on a local receiver are subscribed, and the row is the
// database commands of all replicas during the load (the posts, the
// relay, the fan-out, the claims and the outcomes) per delivery made.
func webhookReplicaRows(ctx context.Context, s *stack) ([]row, error) {
	env := s.convEnv
	defer func() { s.convEnv = env }()
	// The service's default poll (the stack's is 100 ms): a replica's
	// fixed cost counts here.
	s.convEnv = append(slices.Clone(env), "CONVERSATIONS_WEBHOOK_POLL_INTERVAL=1s")
	sink, err := newHookSink()
	if err != nil {
		return nil, err
	}
	defer sink.srv.Close()
	var runs []webhookRun
	for _, n := range []int{1, 3} {
		if err := s.freshConversations(ctx, fmt.Sprintf("webhook_replicas%d", n)); err != nil {
			return nil, err
		}
		r, err := s.webhookRun(ctx, sink, n)
		if err != nil {
			return nil, fmt.Errorf("webhooks with %d replicas: %w", n, err)
		}
		runs = append(runs, r)
		fmt.Fprintln(os.Stderr, "  "+describeWebhookRun(r)) // kept should the next run fail
	}
	one, three := runs[0], runs[1]
	describe := describeWebhookRun
	cost := three.commandsPerDeliver / max(one.commandsPerDeliver, 1e-9)
	return []row{{
		measure: fmt.Sprintf("Webhooks: database commands of all replicas per delivery (fan-out, claims, outcomes, and the posts and relay that cause them), 3 replicas vs 1, %d endpoints, %d writers × %d messages, one every %v each, spread over the replicas",
			replicaEndpoints, relayWriters, relayMessages(s.o), relayPace),
		subject: describe(three), against: describe(one),
		ratio: spread{median: cost, min: cost, max: cost, n: 1}, unit: "× 1 replica",
		target: "≤ 1.10", hasGoal: true, met: cost <= 1.1, id: "webhook-replicas",
	}}, nil
}

func describeWebhookRun(r webhookRun) string {
	return fmt.Sprintf("%.2f per delivery with %d replica(s) (%.0f in %s for %.0f deliveries: %s; idle before the load %.1f a second)",
		r.commandsPerDeliver, r.replicas, r.commands, r.took.Round(100*time.Millisecond), r.deliveries, r.byName, r.idlePerSecond)
}

// webhookRun starts n-1 replicas beside s.conv, subscribes the
// endpoints, runs the relay measure's load through all n, and counts the
// commands of all replicas until every event has reached the receiver
// once per endpoint and every outcome is recorded.
func (s *stack) webhookRun(ctx context.Context, sink *hookSink, n int) (webhookRun, error) {
	out := webhookRun{replicas: n}
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
	// The endpoints start at the newest event: the creations above are
	// not theirs.
	manager, err := s.clientCredentialsToken(ctx, client, "webhooks:manage,conversations:read")
	if err != nil {
		return out, err
	}
	for i := range replicaEndpoints {
		body, _ := json.Marshal(map[string]any{"url": fmt.Sprintf("%s/replicas/%d", sink.url, i)})
		if status, got, err := postWithBearer(ctx, client, manager, s.convURL+"/v1/webhooks", body); err != nil || status != http.StatusCreated {
			return out, fmt.Errorf("create webhook: %d %s %v", status, got, err)
		}
	}
	// Replicas just started poll at their first interval and back off
	// while they find nothing (the due deliveries' poll to 16 intervals,
	// 16 s at the service's 1 s), and each sweeps at start: deployed
	// replicas run for days, and the measure is of their pace, not of
	// their start.
	time.Sleep(s.o.settle)
	// What the replicas send a second with nothing to do (their leases,
	// their polls), for the row's reading: not subtracted, since on the
	// embedded store the pollers slow down as the load grows.
	idle0, err := sumMetrics(ctx, ops, "mongodb_commands_total")
	if err != nil {
		return out, err
	}
	time.Sleep(s.o.idleWindow)
	commands0, err := commandsByName(ctx, ops)
	if err != nil {
		return out, err
	}
	for _, c := range commands0 {
		out.idlePerSecond += c
	}
	out.idlePerSecond = (out.idlePerSecond - idle0) / s.o.idleWindow.Seconds()
	received0 := sink.count.Load()
	began := time.Now()
	errs, done := pacedPosts(ctx, client, bearer, urls, convs, relayMessages(s.o), func(string, time.Time) {})
	select {
	case <-done:
	case <-ctx.Done():
		return out, ctx.Err()
	}
	select {
	case err := <-errs:
		return out, err
	default:
	}
	// Every event the posts caused (a message.created each, and what
	// else a post records) goes to every endpoint.
	events := relayWriters * relayMessages(s.o)
	tail, err := s.logTail(ctx, accountID, after, events)
	if err != nil {
		return out, err
	}
	caused, err := s.client.Database(s.convDB).Collection("events").CountDocuments(ctx,
		bson.D{{Key: "account_id", Value: accountID}, {Key: "sequence", Value: bson.D{{Key: "$gt", Value: after}, {Key: "$lte", Value: tail}}}})
	if err != nil {
		return out, err
	}
	if err := sink.waitCount(ctx, received0+caused*replicaEndpoints); err != nil {
		return out, err
	}
	if err := s.waitRecorded(ctx); err != nil {
		return out, err
	}
	out.took = time.Since(began)
	out.deliveries = float64(sink.count.Load() - received0)
	if out.commands, out.byName, err = commandsSince(ctx, ops, commands0); err != nil {
		return out, err
	}
	out.commandsPerDeliver = out.commands / out.deliveries
	return out, nil
}

// waitRecorded waits until no delivery of the measure's database is
// pending: every outcome is recorded. It gives up when the count has not
// fallen for stallAfter.
func (s *stack) waitRecorded(ctx context.Context) error {
	deliveries := s.client.Database(s.convDB).Collection("webhook_deliveries")
	last, moved := int64(-1), time.Now()
	for {
		n, err := deliveries.CountDocuments(ctx, bson.D{{Key: "state", Value: "pending"}})
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if n != last {
			last, moved = n, time.Now()
		} else if time.Since(moved) > stallAfter {
			return fmt.Errorf("%d deliveries still pending, none recorded in the last %v", n, stallAfter)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d deliveries still pending: %w", n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
