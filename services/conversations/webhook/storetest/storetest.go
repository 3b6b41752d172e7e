// Package storetest is the behaviour of the webhooks, the rules of
// webhook.Service over a real webhook.Store, written once as tests and run
// by every store implementation, never a mock:
//
//	func TestWebhookStore(t *testing.T) { storetest.Run(t, func(t *testing.T) storetest.Store { ... }) }
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook"
)

// Store is what the suite runs on: the webhooks' store and the
// conversations' (whose changes record the events that webhooks deliver).
type Store interface {
	webhook.Store
	conversations.Store
}

// NewStore returns an empty store for one subtest.
type NewStore func(t *testing.T) Store

// Run runs the conformance suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, store Store)
	}{
		{"Rules", testRules},
		{"ClaimsInBatches", testClaimsInBatches},
		{"Purge", testPurge},
		{"EndpointsAreScopedByAccount", testEndpointScope},
		{"DeliveriesAreScopedByAccount", testDeliveryScope},
		{"OneDeliveryPerEndpointAndEvent", testOneDeliveryPerEvent},
		{"EndpointPagesCoverEverythingOnceInOrder", testEndpointPaging},
		{"SaveEndpointIsCompareAndSet", testSaveEndpointCAS},
		{"QuotaWindows", testQuota},
		{"FanOutCursors", testFanOutCursors},
		{"FanOutSweep", testFanOutSweep},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

// testRules: the rules of webhook.Service with a clock the test moves:
// events of the log become deliveries once, claims are leases, an outcome
// is recorded only while its claim holds, the retry schedule with its
// jitter and Retry-After, and an endpoint failing for DisableAfter is
// disabled. (HTTP delivery itself: package delivery and deploy/e2e.)
func testRules(t *testing.T, store Store) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	box, err := webhook.NewSecretBox([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	wh := &webhook.Service{
		Store: store, Events: store, Box: box, Now: clock,
		RetrySchedule: []time.Duration{time.Minute, time.Hour}, DisableAfter: 24 * time.Hour,
	}
	svc := &conversations.Service{Store: store, Now: clock}
	relay := &conversations.Relay{Store: store, Now: clock}
	client := conversations.Caller{AccountID: "acc_rules", ID: "cli_rules", Client: true}
	user := conversations.Caller{AccountID: "acc_rules", ID: "usr_9f86d081884c7d659a2feaa0"}

	// An event before the endpoint exists is not its.
	if _, err := svc.CreateConversation(ctx, user, conversations.Conversation{Participants: []string{user.ID}, Status: conversations.StatusOpen}); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.RelayOnce(ctx); err != nil {
		t.Fatal(err)
	}
	url := "https://hooks.example.com/in"
	messagesOnly := []string{"message.created"}
	e, secret, err := wh.CreateEndpoint(ctx, client, webhook.NewEndpoint{URL: &url, Events: &messagesOnly})
	if err != nil {
		t.Fatal(err)
	}
	// The secret is sealed at rest under the box's key, with the endpoint
	// id bound: it opens for this endpoint only.
	stored, _ := store.FindEndpoint(ctx, client.AccountID, e.ID)
	if strings.Contains(string(stored.Secrets[0].Sealed), secret[6:]) {
		t.Fatal("the secret is stored in the clear")
	}
	if got, err := box.Open(e.ID, stored.Secrets[0].Sealed); err != nil || got != secret {
		t.Fatalf("open: %v", err)
	}
	if _, err := box.Open("whk_000000000000000000000000", stored.Secrets[0].Sealed); err == nil {
		t.Fatal("a sealed secret opened for another endpoint")
	}

	// Events after its creation: a conversation and a message; only the
	// message matches the subscription.
	conv, err := svc.CreateConversation(ctx, user, conversations.Conversation{Participants: []string{user.ID}, Status: conversations.StatusOpen})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PostMessage(ctx, user, conversations.Message{ConversationID: conv.ID, Body: "hello", Metadata: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.RelayOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// Fanned out as the relay's replica does; then a sweep finds
	// nothing new.
	if _, err := wh.FanOutAccounts(ctx, []string{client.AccountID}); err != nil {
		t.Fatal(err)
	}
	if _, err := wh.FanOutSweep(ctx, nil); err != nil {
		t.Fatal(err)
	}
	page, err := wh.ListDeliveries(ctx, client, e.ID, 10, nil)
	if err != nil || len(page.Deliveries) != 1 || page.Deliveries[0].EventType != "message.created" {
		t.Fatalf("deliveries %+v %v", page.Deliveries, err)
	}
	var payload struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Sequence int64  `json:"sequence"`
		Data     struct {
			Message struct{ Body string } `json:"message"`
		} `json:"data"`
	}
	d := page.Deliveries[0]
	if err := json.Unmarshal(d.Payload, &payload); err != nil || payload.ID != d.EventID || payload.Sequence == 0 || payload.Data.Message.Body != "hello" {
		t.Fatalf("payload %s", d.Payload)
	}

	// A claim holds for its lease; then another replica takes it, and
	// the first one's outcome is not recorded.
	a1, ok, err := claimOne(t, wh, "replica-1")
	if err != nil || !ok || a1.Delivery.ID != d.ID || a1.URL != url || len(a1.Secrets) != 1 || a1.Secrets[0] != secret {
		t.Fatalf("claim: %+v %v %v", a1, ok, err)
	}
	if _, ok, _ := claimOne(t, wh, "replica-2"); ok {
		t.Fatal("a claimed delivery was claimed again within its lease")
	}
	now = now.Add(31 * time.Second)
	a2, ok, err := claimOne(t, wh, "replica-2")
	if err != nil || !ok || a2.Delivery.ID != d.ID {
		t.Fatalf("takeover: %v %v", ok, err)
	}
	if out, err := finishOne(wh, a1, webhook.AttemptResult{Status: 200}); err != nil || out.Recorded {
		t.Fatalf("an expired claim recorded its outcome: %+v %v", out, err)
	}
	// A failure: the next attempt in a minute ±20 %.
	out, err := finishOne(wh, a2, webhook.AttemptResult{Status: 500, Error: "the endpoint answered 500"})
	if err != nil || !out.Recorded || out.State != webhook.DeliveryPending {
		t.Fatalf("failure: %+v %v", out, err)
	}
	d = delivery(t, wh, client, e.ID)
	if d.Attempts != 1 || d.NextAttemptAt == nil || d.NextAttemptAt.Before(now.Add(48*time.Second)) || d.NextAttemptAt.After(now.Add(72*time.Second)) {
		t.Fatalf("after one failure: attempts %d, next %v (now %v)", d.Attempts, d.NextAttemptAt, now)
	}
	if _, ok, _ := claimOne(t, wh, "replica-1"); ok {
		t.Fatal("claimed before it was due")
	}
	// Retry-After beyond the schedule postpones it, at most 24 h.
	now = now.Add(2 * time.Minute)
	a3, ok, _ := claimOne(t, wh, "replica-1")
	if !ok {
		t.Fatal("not due after its wait")
	}
	if _, ok, _ := claimOne(t, wh, "replica-2"); ok {
		t.Fatal("claimed twice")
	}
	finishOne(wh, a3, webhook.AttemptResult{Status: 429, RetryAfter: 48 * time.Hour})
	d = delivery(t, wh, client, e.ID)
	if d.State != webhook.DeliveryPending || !d.NextAttemptAt.Equal(now.Add(webhook.MaxRetryAfter)) {
		t.Fatalf("Retry-After 48 h: next %v, want %v", d.NextAttemptAt, now.Add(webhook.MaxRetryAfter))
	}
	// The last attempt of the schedule fails the delivery; failing since
	// the first failure for DisableAfter disables the endpoint.
	now = now.Add(24*time.Hour + time.Second)
	a4, ok, _ := claimOne(t, wh, "replica-1")
	if !ok {
		t.Fatal("not due after Retry-After")
	}
	out, err = finishOne(wh, a4, webhook.AttemptResult{Error: "no response within 15s"})
	if err != nil || out.State != webhook.DeliveryFailed || !out.Disabled {
		t.Fatalf("last attempt: %+v %v", out, err)
	}
	got, _ := wh.GetEndpoint(ctx, client, e.ID)
	if got.Enabled || got.DisabledReason == nil || !strings.Contains(*got.DisabledReason, "no delivery succeeded") {
		t.Fatalf("endpoint after a day of failures: %+v", got)
	}

	// A disabled endpoint's pending delivery ends failed, unsent; so does
	// a deleted one's.
	if _, err := wh.SendTest(ctx, client, e.ID); err != nil {
		t.Fatal(err)
	}
	a5, ok, _ := claimOne(t, wh, "replica-1")
	if !ok || a5.Refusal == "" || len(a5.Secrets) != 0 {
		t.Fatalf("disabled endpoint's delivery: %+v", a5)
	}
	if out, _ := finishOne(wh, a5, webhook.AttemptResult{}); out.State != webhook.DeliveryFailed {
		t.Fatalf("disabled endpoint's delivery: %+v", out)
	}
	// Re-enabled, it starts at the newest event: what happened while it
	// was disabled is not delivered.
	if _, err := svc.PostMessage(ctx, user, conversations.Message{ConversationID: conv.ID, Body: "while disabled", Metadata: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	relay.RelayOnce(ctx)
	enable := true
	if _, err := wh.UpdateEndpoint(ctx, client, e.ID, webhook.Patch{Enabled: &enable}); err != nil {
		t.Fatal(err)
	}
	if _, err := wh.FanOutAccounts(ctx, []string{client.AccountID}); err != nil {
		t.Fatal(err)
	}
	page, _ = wh.ListDeliveries(ctx, client, e.ID, 10, nil)
	for _, d := range page.Deliveries {
		var p struct {
			Data struct{ Message struct{ Body string } }
		}
		json.Unmarshal(d.Payload, &p)
		if p.Data.Message.Body == "while disabled" {
			t.Fatal("an event recorded while the endpoint was disabled was delivered")
		}
	}
}

// claimOne claims at most one due delivery for 30 s, as an engine with
// one free slot does.
func claimOne(t *testing.T, wh *webhook.Service, claim string) (webhook.Attempt, bool, error) {
	t.Helper()
	as, _, err := wh.ClaimAttempts(context.Background(), claim, 30*time.Second, 0, webhook.Slots{Free: 1, PerEndpoint: 4})
	if err != nil || len(as) == 0 {
		return webhook.Attempt{}, false, err
	}
	if len(as) > 1 {
		t.Fatalf("one free slot, %d attempts claimed", len(as))
	}
	return as[0], true, nil
}

// finishOne records one attempt's outcome.
func finishOne(wh *webhook.Service, a webhook.Attempt, r webhook.AttemptResult) (webhook.FinishOutcome, error) {
	outs, err := wh.FinishAttempts(context.Background(), []webhook.Attempt{a}, []webhook.AttemptResult{r})
	if len(outs) == 0 {
		return webhook.FinishOutcome{}, err
	}
	return outs[0], err
}

// delivery is the newest delivery of the endpoint.
func delivery(t *testing.T, wh *webhook.Service, who conversations.Caller, endpointID string) webhook.Delivery {
	t.Helper()
	page, err := wh.ListDeliveries(context.Background(), who, endpointID, 1, nil)
	if err != nil || len(page.Deliveries) != 1 {
		t.Fatalf("deliveries: %v", err)
	}
	return page.Deliveries[0]
}

// testClaimsInBatches: deliveries are claimed in batches within the
// engine's slots (in all and per endpoint), due longest ago first;
// replicas claiming at once each get their own; and of a batch of
// outcomes exactly those whose claims still hold are recorded.
func testClaimsInBatches(t *testing.T, store Store) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	box, err := webhook.NewSecretBox([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	wh := &webhook.Service{Store: store, Box: box, Now: func() time.Time { return now }}
	client := conversations.Caller{AccountID: "acc_batch", ID: "cli_batch", Client: true}
	var endpoints []string
	for _, u := range []string{"https://a.example.com/in", "https://b.example.com/in"} {
		e, _, err := wh.CreateEndpoint(ctx, client, webhook.NewEndpoint{URL: &u})
		if err != nil {
			t.Fatal(err)
		}
		endpoints = append(endpoints, e.ID)
	}
	// Six deliveries due for the first endpoint, then two for the second.
	var ds []webhook.Delivery
	for i := range 8 {
		due := now.Add(time.Duration(i-10) * time.Second)
		ds = append(ds, webhook.Delivery{
			ID: webhook.NewDeliveryID(), AccountID: client.AccountID, EndpointID: endpoints[i/6],
			EventID: conversations.NewEventID(), EventType: "webhook.test", EventTime: due, Payload: []byte(`{}`),
			State: webhook.DeliveryPending, NextAttemptAt: &due, CreatedAt: due, UpdatedAt: due,
		})
	}
	if err := store.InsertDeliveries(ctx, ds); err != nil {
		t.Fatal(err)
	}
	ids := func(as []webhook.Attempt) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.Delivery.ID)
		}
		return out
	}
	// A claim for those due at least an hour ago (as a poll leaves the
	// fresh ones to their recorder) finds none of them.
	if as, more, err := wh.ClaimAttempts(ctx, "replica-1", time.Minute, time.Hour, webhook.Slots{Free: 5, PerEndpoint: 2}); err != nil || len(as) != 0 || more {
		t.Fatalf("claimed %v (more %v) of deliveries due for seconds only: %v", ids(as), more, err)
	}
	// Room for five, two per endpoint: the first two of each.
	first, more, err := wh.ClaimAttempts(ctx, "replica-1", time.Minute, 0, webhook.Slots{Free: 5, PerEndpoint: 2})
	if err != nil || !more {
		t.Fatalf("claim: %v, more %v", err, more)
	}
	if got, want := ids(first), []string{ds[0].ID, ds[1].ID, ds[6].ID, ds[7].ID}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	for _, a := range first {
		if a.URL == "" || len(a.Secrets) != 1 || a.Refusal != "" {
			t.Fatalf("attempt without its endpoint: %+v", a)
		}
	}
	// An endpoint with no room left is passed over.
	full := map[string]int{endpoints[0]: 2, endpoints[1]: 2}
	if as, _, err := wh.ClaimAttempts(ctx, "replica-1", time.Minute, 0, webhook.Slots{Free: 5, PerEndpoint: 2, InFlight: full}); err != nil || len(as) != 0 {
		t.Fatalf("claimed %v past the per-endpoint room (%v)", ids(as), err)
	}
	// Two replicas at once take the other four between them, each once.
	var got [2][]string
	var wg sync.WaitGroup
	for r := range got {
		wg.Go(func() {
			as, _, err := wh.ClaimAttempts(ctx, fmt.Sprintf("replica-%d", r+2), time.Minute, 0, webhook.Slots{Free: 10, PerEndpoint: 10})
			if err != nil {
				t.Error(err)
			}
			got[r] = ids(as)
		})
	}
	wg.Wait()
	both := append(slices.Clone(got[0]), got[1]...)
	slices.Sort(both)
	want := []string{ds[2].ID, ds[3].ID, ds[4].ID, ds[5].ID}
	slices.Sort(want)
	if !slices.Equal(both, want) {
		t.Fatalf("concurrent claims took %v and %v, want each of %v once", got[0], got[1], want)
	}
	// One of the first batch is taken from its claim (an operator's
	// retry); the batch's outcomes are recorded for the other three only.
	if ok, err := store.RequeueDelivery(ctx, client.AccountID, endpoints[0], first[1].Delivery.ID, now); err != nil || !ok {
		t.Fatalf("requeue: %v %v", ok, err)
	}
	now = now.Add(time.Second)
	results := make([]webhook.AttemptResult, len(first))
	for i := range results {
		results[i] = webhook.AttemptResult{Status: 204}
	}
	outs, err := wh.FinishAttempts(ctx, first, results)
	if err != nil {
		t.Fatal(err)
	}
	for i, out := range outs {
		if want := i != 1; out.Recorded != want {
			t.Fatalf("outcome %d recorded %v, want %v", i, out.Recorded, want)
		}
	}
	page, err := wh.ListDeliveries(ctx, client, endpoints[1], 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range page.Deliveries {
		if d.State != webhook.DeliverySucceeded || d.Attempts != 1 || d.ResponseStatus == nil || *d.ResponseStatus != 204 {
			t.Fatalf("recorded delivery %+v", d)
		}
	}
}

// testPurge: the purge deletes the deliveries that ended (succeeded or
// failed) and last changed longer ago than the retention, never a pending
// one however old, nor one set back to pending; and the test and retry
// budgets whose window ended long ago.
func testPurge(t *testing.T, store Store) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	box, err := webhook.NewSecretBox([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	wh := &webhook.Service{Store: store, Box: box, Now: func() time.Time { return now }}
	client := conversations.Caller{AccountID: "acc_purge", ID: "cli_purge", Client: true}
	u := "https://hooks.example.com/in"
	e, _, err := wh.CreateEndpoint(ctx, client, webhook.NewEndpoint{URL: &u})
	if err != nil {
		t.Fatal(err)
	}
	const retention = 30 * 24 * time.Hour
	old, recent := now.Add(-retention-time.Minute), now.Add(-retention+time.Minute)
	delivery := func(state webhook.DeliveryState, at time.Time) webhook.Delivery {
		d := webhook.Delivery{
			ID: webhook.NewDeliveryID(), AccountID: client.AccountID, EndpointID: e.ID,
			EventID: conversations.NewEventID(), EventType: "webhook.test", EventTime: at, Payload: []byte(`{}`),
			State: state, Attempts: 1, CreatedAt: at, UpdatedAt: at,
		}
		if state == webhook.DeliveryPending {
			d.NextAttemptAt = &at
		}
		return d
	}
	ds := map[string]webhook.Delivery{
		"old succeeded":    delivery(webhook.DeliverySucceeded, old),
		"old failed":       delivery(webhook.DeliveryFailed, old),
		"old pending":      delivery(webhook.DeliveryPending, old),
		"old retried":      delivery(webhook.DeliveryFailed, old),
		"recent succeeded": delivery(webhook.DeliverySucceeded, recent),
		"recent failed":    delivery(webhook.DeliveryFailed, recent),
		"recent pending":   delivery(webhook.DeliveryPending, recent),
	}
	if err := store.InsertDeliveries(ctx, slices.Collect(maps.Values(ds))); err != nil {
		t.Fatal(err)
	}
	// An operator's retry sets an old failed one back to pending.
	if ok, err := store.RequeueDelivery(ctx, client.AccountID, e.ID, ds["old retried"].ID, now); err != nil || !ok {
		t.Fatalf("requeue: %v %v", ok, err)
	}
	// Budgets of one request each: one whose window ended two hours ago,
	// one running.
	for _, kind := range []string{"old", "running"} {
		at := now.Add(-30 * time.Second)
		if kind == "old" {
			at = now.Add(-2 * time.Hour)
		}
		if _, err := store.TakeQuota(ctx, client.AccountID, e.ID, kind, at, time.Minute, 1); err != nil {
			t.Fatal(err)
		}
	}

	n, err := wh.PurgeDeliveries(ctx, now, retention)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("purged %d, want 3 (two deliveries, one budget)", n)
	}
	page, err := wh.ListDeliveries(ctx, client, e.ID, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, d := range page.Deliveries {
		kept[d.ID] = true
	}
	for name, d := range ds {
		want := name != "old succeeded" && name != "old failed"
		if kept[d.ID] != want {
			t.Errorf("%s: kept %v, want %v", name, kept[d.ID], want)
		}
	}
	// The running budget is kept: it is spent still.
	if wait, err := store.TakeQuota(ctx, client.AccountID, e.ID, "running", now, time.Minute, 1); err != nil || wait <= 0 {
		t.Errorf("the running budget after the purge: wait %v (%v), want it spent", wait, err)
	}
	// A second purge finds nothing more.
	if n, err := wh.PurgeDeliveries(ctx, now, retention); err != nil || n != 0 {
		t.Errorf("second purge: %d, %v", n, err)
	}
}
