package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/mongostore"
	"github.com/acme/platform/services/conversations/webhook"
)

// Webhooks: deliveries per second to a local
// receiver that answers at once, against a bare loop of signed POSTs over
// as many connections as the service uses; change → 2xx at the receiver
// (p50, p99) of the messages posted while 3 endpoints are subscribed; and
// that message post against the driver floor (delivery never runs on the
// request's path).

// webhookEnv configures the bench's conversations service for webhooks
// to the loopback receiver, looked for every 100 ms.
func webhookEnv() []string {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return []string{
		"CONVERSATIONS_WEBHOOK_SECRET_KEY=" + base64.StdEncoding.EncodeToString(key),
		"CONVERSATIONS_WEBHOOK_ALLOW_HTTP=true",
		"CONVERSATIONS_WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8",
		"CONVERSATIONS_WEBHOOK_POLL_INTERVAL=100ms",
		"CONVERSATIONS_WEBHOOK_MANUAL_PER_MINUTE=100000",
	}
}

// benchPerEndpoint is the service's default CONVERSATIONS_WEBHOOK_PER_ENDPOINT.
const benchPerEndpoint = 4

// hookSink is the local receiver: it answers 204 at once and records
// when each event arrived first.
type hookSink struct {
	srv      *http.Server
	url      string
	count    atomic.Int64
	mu       sync.Mutex
	arrivals map[string]time.Time
}

func newHookSink() (*hookSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &hookSink{arrivals: map[string]time.Time{}, url: "http://" + ln.Addr().String()}
	k.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		now := time.Now()
		id := r.Header.Get("webhook-id")
		k.mu.Lock()
		if _, seen := k.arrivals[id]; !seen {
			k.arrivals[id] = now
		}
		k.mu.Unlock()
		k.count.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = k.srv.Serve(ln) }()
	return k, nil
}

// stallAfter is how long a wait for deliveries goes on without one
// arriving before it gives up: on the shared embedded store a run can
// take minutes, and only a run that stopped moving has failed.
const stallAfter = 2 * time.Minute

// waitCount waits until the sink has counted n requests, or until none
// has arrived for stallAfter.
func (k *hookSink) waitCount(ctx context.Context, n int64) error {
	last, moved := k.count.Load(), time.Now()
	for k.count.Load() < n {
		if c := k.count.Load(); c != last {
			last, moved = c, time.Now()
		} else if time.Since(moved) > stallAfter {
			return fmt.Errorf("the receiver got %d of %d deliveries, none in the last %v", c, n, stallAfter)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the receiver got %d of %d deliveries: %w", k.count.Load(), n, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

func webhooksRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	sink, err := newHookSink()
	if err != nil {
		return nil, err
	}
	defer sink.srv.Close()
	bearer, err := s.clientCredentialsToken(ctx, http.DefaultClient, "webhooks:manage,conversations:read")
	if err != nil {
		return nil, err
	}
	client := loopbackClient(o.workers)
	create := func(path string) (string, error) {
		body, _ := json.Marshal(map[string]any{"url": sink.url + path})
		status, out, err := postWithBearer(ctx, client, bearer, s.convURL+"/v1/webhooks", body)
		var e struct{ ID, Secret string }
		if err == nil && (status != http.StatusCreated || json.Unmarshal(out, &e) != nil) {
			err = fmt.Errorf("create webhook answered %d: %s", status, out)
		}
		return e.ID, err
	}

	// Throughput: one endpoint per worker, each with the service's 4
	// requests in flight; the deliveries are stored pending and due (as a
	// fan-out stores them) and the service drains them to the receiver.
	var endpoints []string
	for i := range o.workers {
		id, err := create(fmt.Sprintf("/drain/%d", i))
		if err != nil {
			return nil, err
		}
		endpoints = append(endpoints, id)
	}
	conns := o.workers * benchPerEndpoint
	// Per round, as many deliveries as a side of the other measures lasts
	// in tens of milliseconds; each round's are deleted after it, so that
	// every round starts from the same collection (the embedded store
	// scans the collection on every claim: see docs/benchmarks.md).
	perRound := max(20, int(o.serviceRun/(10*time.Millisecond)))
	// The deliveries are of the endpoints' account, as a fan-out's are:
	// the engine reads and writes each within its account.
	clientClaims, err := jwtClaims(bearer)
	if err != nil {
		return nil, err
	}
	accountID, _ := clientClaims["account_id"].(string)
	deliveries := s.client.Database(s.convDB).Collection("webhook_deliveries")
	payload := []byte(`{"id":"evt_bench","type":"message.created","sequence":1,"timestamp":"2026-01-01T00:00:00.000Z","data":{}}`)
	// woken: on a quiet replica (see quietCount) nothing looks for due
	// deliveries until a delivery recorded on it wakes its engine: a test
	// delivery, sent after the round's, is that one (and counted as one).
	service := func(ctx context.Context, woken bool) (sample, error) {
		now := time.Now().UTC()
		docs := make([]any, perRound)
		for i := range docs {
			docs[i] = mongostore.NewDeliveryDocument(webhook.Delivery{
				ID: webhook.NewDeliveryID(), AccountID: accountID,
				EndpointID: endpoints[i%len(endpoints)], EventID: conversations.NewEventID(),
				EventType: string(conversations.EventMessageCreated), EventTime: now, Payload: payload,
				State: webhook.DeliveryPending, NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now,
			})
		}
		ops := int64(perRound)
		if woken {
			ops++
		}
		target := sink.count.Load() + ops
		start := time.Now()
		if _, err := deliveries.InsertMany(ctx, docs); err != nil {
			return sample{}, err
		}
		if woken {
			if status, out, err := postWithBearer(ctx, client, bearer, s.convURL+"/v1/webhooks/"+endpoints[0]+"/test", nil); err != nil || status != http.StatusAccepted {
				return sample{}, fmt.Errorf("test delivery: %d %s %v", status, out, err)
			}
		}
		if err := sink.waitCount(ctx, target); err != nil {
			return sample{}, err
		}
		elapsed := time.Since(start)
		// The last outcomes are recorded after their 2xx: wait for them,
		// then start the next round from an empty collection.
		if err := s.waitRecorded(ctx); err != nil {
			return sample{}, err
		}
		if _, err := deliveries.DeleteMany(ctx, bson.D{{Key: "endpoint_id", Value: bson.D{{Key: "$in", Value: endpoints}}}}); err != nil {
			return sample{}, err
		}
		return sample{ops: ops, elapsed: elapsed}, nil
	}
	// The floor: the same number of signed POSTs of the same body from as
	// many goroutines over as many connections, and nothing else.
	floorClient := loopbackClient(conns)
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	floor := func(ctx context.Context) (sample, error) {
		var next atomic.Int64
		var failed atomic.Value
		start := time.Now()
		var wg sync.WaitGroup
		for range conns {
			wg.Go(func() {
				for next.Add(1) <= int64(perRound) {
					if err := signedPost(ctx, floorClient, sink.url+"/floor", secret, payload); err != nil {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			return sample{}, err
		}
		return sample{ops: int64(perRound), elapsed: time.Since(start)}, nil
	}
	var svcSamples, floorSamples []sample
	for r := range o.rounds + 1 { // the first round warms up
		a, err := service(ctx, false)
		if err != nil {
			return nil, fmt.Errorf("webhook deliveries: %w", err)
		}
		b, err := floor(ctx)
		if err != nil {
			return nil, fmt.Errorf("signed POSTs: %w", err)
		}
		if r > 0 {
			svcSamples, floorSamples = append(svcSamples, a), append(floorSamples, b)
		}
	}
	throughput := ratios(svcSamples, floorSamples, throughputRatio)
	counted, err := s.quietCount(ctx, side{name: "deliveries", run: func(ctx context.Context, _ time.Duration) (int64, time.Duration, error) {
		got, err := service(ctx, true)
		return got.ops, got.elapsed, err
	}})
	if err != nil {
		return nil, fmt.Errorf("webhook deliveries: %w", err)
	}
	perDelivery := counted[0].commandsPerOp()
	deliveryMinimum := float64(deliveryBatchCommands) / float64(conns)
	deliveriesMet := perDelivery <= deliveryMinimum*deliveryTolerance && (o.mongoURI == "" || throughput.median >= 0.7)

	// Message posts while 3 endpoints (every event type) are subscribed,
	// against the driver's writes of a post; the posts' message.created
	// events arrive at the receiver, change → 2xx measured for each.
	for i := range 3 {
		if _, err := create(fmt.Sprintf("/subscribed/%d", i)); err != nil {
			return nil, err
		}
	}
	// The drain endpoints take every event type too: delete them, so that
	// exactly 3 are subscribed.
	for _, id := range endpoints {
		if status, _, err := doWithBearer(ctx, client, http.MethodDelete, s.convURL+"/v1/webhooks/"+id, bearer); err != nil || status != http.StatusNoContent {
			return nil, fmt.Errorf("delete webhook: %d %v", status, err)
		}
	}
	user, err := s.login(ctx, client, 0)
	if err != nil {
		return nil, err
	}
	claims, err := jwtClaims(user)
	if err != nil {
		return nil, err
	}
	who := conversations.Caller{}
	who.AccountID, _ = claims["account_id"].(string)
	who.ID, _ = claims["sub"].(string)
	posted := make([]string, o.workers)
	for w := range posted {
		if posted[w], err = s.createConversation(ctx, client, user, fmt.Sprintf("Bench webhooks %d", w)); err != nil {
			return nil, err
		}
	}
	post, driverPost := s.postSides(client, user, who, posted)
	before := time.Now()
	postSamples, err := alternate(ctx, o.rounds, o.serviceRun,
		side{name: "POST …/messages, 3 endpoints", workers: o.workers, op: post},
		side{name: "driver writes", workers: o.workers, op: driverPost, commands: s.driverCmds.read})
	if err != nil {
		return nil, fmt.Errorf("messages with webhooks: %w", err)
	}
	vsDriver := ratios(postSamples[0], postSamples[1], throughputRatio)
	latencies, err := s.deliveryLatencies(ctx, sink, before)
	if err != nil {
		return nil, err
	}
	// After the latencies: the quiet replica's posts are no part of them.
	postCounted, err := s.quietCount(ctx, s.postSide(post))
	if err != nil {
		return nil, fmt.Errorf("messages with webhooks: %w", err)
	}
	perSecond := func(s []sample) string { return thousands(medianOf(s, sample.perSecond)) + "/s" }
	p := func(q float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(q*float64(len(latencies))))]
	}
	return []row{
		{
			measure: fmt.Sprintf("Webhooks: deliveries to a local receiver vs a bare loop of signed POSTs, %d connections", conns),
			subject: perSecond(svcSamples) + " deliveries (stored pending, claimed, signed, posted, recorded)",
			against: perSecond(floorSamples) + " signed POSTs",
			ratio:   throughput, unit: "× bare", id: "webhooks",
			cmds:   cmdsCell(counted, floorSamples),
			target: deliveryTarget(deliveryMinimum, conns, o.mongoURI != ""), hasGoal: true, met: deliveriesMet,
		},
		{
			measure: "Webhooks: change → 2xx at the receiver, p50 and p99",
			value:   fmt.Sprintf("**%d ms** p50, **%d ms** p99", p(0.5).Milliseconds(), p(0.99).Milliseconds()),
			notes:   fmt.Sprintf("%d message.created events posted during the next row, 3 endpoints each (relay, fan-out and delivery polls of 200 ms and 100 ms)", len(latencies)),
			id:      "webhooks",
		},
		{
			measure: fmt.Sprintf("Webhooks: POST /v1/conversations/{id}/messages with 3 endpoints subscribed vs the driver's writes, %d concurrent", o.workers),
			subject: perSecond(postSamples[0]) + " posts",
			against: perSecond(postSamples[1]) + " (find the conversation, insert the message, compare-and-set the conversation)",
			ratio:   vsDriver, unit: "× driver", target: "≥ 0.8", hasGoal: true, met: vsDriver.median >= 0.8, id: "webhooks",
			cmds: cmdsCell(postCounted, postSamples[1]),
		},
	}, nil
}

// deliveryLatencies waits until every message.created event recorded
// since before has reached the receiver once per subscribed endpoint, and
// returns each event's change → first 2xx, sorted.
func (s *stack) deliveryLatencies(ctx context.Context, sink *hookSink, before time.Time) ([]time.Duration, error) {
	events := s.client.Database(s.convDB).Collection("events")
	var want []struct {
		ID        string    `bson:"_id"`
		Timestamp time.Time `bson:"timestamp"`
	}
	// Every post's event, once the relay has ordered them all.
	cur, err := events.Find(ctx, bson.D{{Key: "type", Value: "message.created"}, {Key: "timestamp", Value: bson.D{{Key: "$gte", Value: before}}}})
	if err != nil {
		return nil, err
	}
	if err := cur.All(ctx, &want); err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, e := range want {
		for {
			sink.mu.Lock()
			at, ok := sink.arrivals[e.ID]
			sink.mu.Unlock()
			if ok {
				out = append(out, max(at.Sub(e.Timestamp), 0))
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("event %s never reached the receiver: %w", e.ID, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// signedPost is one delivery as the floor makes it: sign with HMAC-SHA256
// as Standard Webhooks does, POST, read the answer.
func signedPost(ctx context.Context, c *http.Client, url string, secret, body []byte) error {
	id := "evt_" + hex.EncodeToString(secret[:12])
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	status, _, err := do(c, req)
	if err == nil && status != http.StatusNoContent {
		err = fmt.Errorf("receiver answered %d", status)
	}
	return err
}

// doWithBearer sends a request without a body.
func doWithBearer(ctx context.Context, c *http.Client, method, url, bearer string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	return do(c, req)
}
