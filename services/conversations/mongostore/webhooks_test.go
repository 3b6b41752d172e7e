package mongostore_test

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

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/mongostore"
)

// The rules of conversations.Webhooks on the real store, with a clock the
// test moves: events of the log become deliveries once, claims are
// leases, an outcome is recorded only while its claim holds, the retry
// schedule with its jitter and Retry-After, and an endpoint failing for
// DisableAfter is disabled. (HTTP delivery itself: deploy/e2e.)
func TestWebhookRules(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	box, err := conversations.NewSecretBox([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	wh := &conversations.Webhooks{
		Store: store, Events: conversations.EventLogOf(store), Box: box, Now: clock,
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
	e, secret, err := wh.CreateEndpoint(ctx, client, conversations.NewWebhookEndpoint{URL: &url, Events: &messagesOnly})
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
	if out, err := finishOne(wh, a1, conversations.AttemptResult{Status: 200}); err != nil || out.Recorded {
		t.Fatalf("an expired claim recorded its outcome: %+v %v", out, err)
	}
	// A failure: the next attempt in a minute ±20 %.
	out, err := finishOne(wh, a2, conversations.AttemptResult{Status: 500, Error: "the endpoint answered 500"})
	if err != nil || !out.Recorded || out.State != conversations.DeliveryPending {
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
	finishOne(wh, a3, conversations.AttemptResult{Status: 429, RetryAfter: 48 * time.Hour})
	d = delivery(t, wh, client, e.ID)
	if d.State != conversations.DeliveryPending || !d.NextAttemptAt.Equal(now.Add(conversations.MaxRetryAfter)) {
		t.Fatalf("Retry-After 48 h: next %v, want %v", d.NextAttemptAt, now.Add(conversations.MaxRetryAfter))
	}
	// The last attempt of the schedule fails the delivery; failing since
	// the first failure for DisableAfter disables the endpoint.
	now = now.Add(24*time.Hour + time.Second)
	a4, ok, _ := claimOne(t, wh, "replica-1")
	if !ok {
		t.Fatal("not due after Retry-After")
	}
	out, err = finishOne(wh, a4, conversations.AttemptResult{Error: "no response within 15s"})
	if err != nil || out.State != conversations.DeliveryFailed || !out.Disabled {
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
	if out, _ := finishOne(wh, a5, conversations.AttemptResult{}); out.State != conversations.DeliveryFailed {
		t.Fatalf("disabled endpoint's delivery: %+v", out)
	}
	// Re-enabled, it starts at the newest event: what happened while it
	// was disabled is not delivered.
	if _, err := svc.PostMessage(ctx, user, conversations.Message{ConversationID: conv.ID, Body: "while disabled", Metadata: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	relay.RelayOnce(ctx)
	enable := true
	if _, err := wh.UpdateEndpoint(ctx, client, e.ID, conversations.WebhookPatch{Enabled: &enable}); err != nil {
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
// TestWebhookFanOutSweep: the sweep fans out only the accounts of the
// slots its replica holds (an endpoint stored without its slot too), and fan-outs repeated by two replicas (a partition
// changing hands) store each delivery once and never move a cursor back.
func TestWebhookFanOutSweep(t *testing.T) {
	ctx := context.Background()
	db, store := newStoreOn(t)
	box, err := conversations.NewSecretBox([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	wh := &conversations.Webhooks{Store: store, Events: conversations.EventLogOf(store), Box: box}
	svc := &conversations.Service{Store: store}
	relay := &conversations.Relay{Store: store}
	url := "https://hooks.example.com/in"
	accounts := []string{"acc_sweep_a", "acc_sweep_b"}
	endpoints := map[string]string{}
	for _, account := range accounts {
		client := conversations.Caller{AccountID: account, ID: "cli_sweep", Client: true}
		e, _, err := wh.CreateEndpoint(ctx, client, conversations.NewWebhookEndpoint{URL: &url})
		if err != nil {
			t.Fatal(err)
		}
		endpoints[account] = e.ID
		user := conversations.Caller{AccountID: account, ID: "usr_9f86d081884c7d659a2feaa0"}
		for range 3 {
			if _, err := svc.CreateConversation(ctx, user, conversations.Conversation{Participants: []string{user.ID}, Status: conversations.StatusOpen}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := relay.RelayOnce(ctx); err != nil {
		t.Fatal(err)
	}
	count := func(account string) int {
		t.Helper()
		page, err := wh.ListDeliveries(ctx, conversations.Caller{AccountID: account, ID: "cli_sweep", Client: true}, endpoints[account], 100, nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Deliveries)
	}
	// The first endpoint as stored before endpoints carried their
	// account's slot: the sweep of its slot finds it still.
	if _, err := db.Collection("webhooks").UpdateOne(ctx, bson.D{{Key: "_id", Value: endpoints[accounts[0]]}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "slot", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := wh.FanOutSweep(ctx, []int{conversations.PendingSlot(accounts[0])}); err != nil {
		t.Fatal(err)
	}
	if a, b := count(accounts[0]), count(accounts[1]); a != 3 || b != 0 {
		t.Fatalf("a sweep holding only %s: deliveries %d and %d, want 3 and 0", accounts[0], a, b)
	}
	// Two replicas fanning out both accounts at once, as a partition
	// changes hands.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := wh.FanOutAccounts(ctx, accounts); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if a, b := count(accounts[0]), count(accounts[1]); a != 3 || b != 3 {
		t.Fatalf("after fan-outs repeated: deliveries %d and %d, want 3 each", a, b)
	}
	// A cursor only moves forward.
	if err := store.AdvanceCursors(ctx, map[string]int64{endpoints[accounts[0]]: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := wh.FanOutSweep(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if a := count(accounts[0]); a != 3 {
		t.Fatalf("a cursor moved back: %d deliveries, want 3", a)
	}
	for _, account := range accounts {
		e, err := store.FindEndpoint(ctx, account, endpoints[account])
		if err != nil || e.EventCursor != 3 {
			t.Fatalf("%s: cursor %d %v, want 3", account, e.EventCursor, err)
		}
	}
}

func claimOne(t *testing.T, wh *conversations.Webhooks, claim string) (conversations.Attempt, bool, error) {
	t.Helper()
	as, _, err := wh.ClaimAttempts(context.Background(), claim, 30*time.Second, conversations.Slots{Free: 1, PerEndpoint: 4})
	if err != nil || len(as) == 0 {
		return conversations.Attempt{}, false, err
	}
	if len(as) > 1 {
		t.Fatalf("one free slot, %d attempts claimed", len(as))
	}
	return as[0], true, nil
}

// finishOne records one attempt's outcome.
func finishOne(wh *conversations.Webhooks, a conversations.Attempt, r conversations.AttemptResult) (conversations.FinishOutcome, error) {
	outs, err := wh.FinishAttempts(context.Background(), []conversations.Attempt{a}, []conversations.AttemptResult{r})
	if len(outs) == 0 {
		return conversations.FinishOutcome{}, err
	}
	return outs[0], err
}

// delivery is the newest delivery of the endpoint.
func delivery(t *testing.T, wh *conversations.Webhooks, who conversations.Caller, endpointID string) conversations.WebhookDelivery {
	t.Helper()
	page, err := wh.ListDeliveries(context.Background(), who, endpointID, 1, nil)
	if err != nil || len(page.Deliveries) != 1 {
		t.Fatalf("deliveries: %v", err)
	}
	return page.Deliveries[0]
}

// Deliveries are claimed in batches within the engine's slots (in all
// and per endpoint), due longest ago first; replicas claiming at once
// each get their own; and of a batch of outcomes exactly those whose
// claims still hold are recorded.
func TestWebhookClaimsInBatches(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	box, err := conversations.NewSecretBox([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	wh := &conversations.Webhooks{Store: store, Box: box, Now: func() time.Time { return now }}
	client := conversations.Caller{AccountID: "acc_batch", ID: "cli_batch", Client: true}
	var endpoints []string
	for _, u := range []string{"https://a.example.com/in", "https://b.example.com/in"} {
		e, _, err := wh.CreateEndpoint(ctx, client, conversations.NewWebhookEndpoint{URL: &u})
		if err != nil {
			t.Fatal(err)
		}
		endpoints = append(endpoints, e.ID)
	}
	// Six deliveries due for the first endpoint, then two for the second.
	var ds []conversations.WebhookDelivery
	for i := range 8 {
		due := now.Add(time.Duration(i-10) * time.Second)
		ds = append(ds, conversations.WebhookDelivery{
			ID: conversations.NewDeliveryID(), AccountID: client.AccountID, EndpointID: endpoints[i/6],
			EventID: conversations.NewTestEventID(), EventType: "webhook.test", EventTime: due, Payload: []byte(`{}`),
			State: conversations.DeliveryPending, NextAttemptAt: &due, CreatedAt: due, UpdatedAt: due,
		})
	}
	if err := store.InsertDeliveries(ctx, ds); err != nil {
		t.Fatal(err)
	}
	ids := func(as []conversations.Attempt) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.Delivery.ID)
		}
		return out
	}
	// Room for five, two per endpoint: the first two of each.
	first, more, err := wh.ClaimAttempts(ctx, "replica-1", time.Minute, conversations.Slots{Free: 5, PerEndpoint: 2})
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
	if as, _, err := wh.ClaimAttempts(ctx, "replica-1", time.Minute, conversations.Slots{Free: 5, PerEndpoint: 2, InFlight: full}); err != nil || len(as) != 0 {
		t.Fatalf("claimed %v past the per-endpoint room (%v)", ids(as), err)
	}
	// Two replicas at once take the other four between them, each once.
	var got [2][]string
	var wg sync.WaitGroup
	for r := range got {
		wg.Go(func() {
			as, _, err := wh.ClaimAttempts(ctx, fmt.Sprintf("replica-%d", r+2), time.Minute, conversations.Slots{Free: 10, PerEndpoint: 10})
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
	results := make([]conversations.AttemptResult, len(first))
	for i := range results {
		results[i] = conversations.AttemptResult{Status: 204}
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
		if d.State != conversations.DeliverySucceeded || d.Attempts != 1 || d.ResponseStatus == nil || *d.ResponseStatus != 204 {
			t.Fatalf("recorded delivery %+v", d)
		}
	}
}

// TestWebhookPurge: the purge deletes the deliveries that ended
// (succeeded or failed) and last changed longer ago than the retention,
// never a pending one however old, nor one set back to pending; and the
// test and retry budgets whose window ended long ago. Both by indexes.
func TestWebhookPurge(t *testing.T) {
	ctx := context.Background()
	db := mongotest.New(t)
	store := mongostore.New(db)
	if err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	assertIndexes(t, db, "webhook_deliveries", map[string]string{"by_finished": "state:1 updated_at:1"})
	assertIndexes(t, db, "webhook_quotas", map[string]string{"by_window": "window_start:1"})
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	box, err := conversations.NewSecretBox([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	wh := &conversations.Webhooks{Store: store, Box: box, Now: func() time.Time { return now }}
	client := conversations.Caller{AccountID: "acc_purge", ID: "cli_purge", Client: true}
	u := "https://hooks.example.com/in"
	e, _, err := wh.CreateEndpoint(ctx, client, conversations.NewWebhookEndpoint{URL: &u})
	if err != nil {
		t.Fatal(err)
	}
	const retention = 30 * 24 * time.Hour
	old, recent := now.Add(-retention-time.Minute), now.Add(-retention+time.Minute)
	delivery := func(state conversations.DeliveryState, at time.Time) conversations.WebhookDelivery {
		d := conversations.WebhookDelivery{
			ID: conversations.NewDeliveryID(), AccountID: client.AccountID, EndpointID: e.ID,
			EventID: conversations.NewTestEventID(), EventType: "webhook.test", EventTime: at, Payload: []byte(`{}`),
			State: state, Attempts: 1, CreatedAt: at, UpdatedAt: at,
		}
		if state == conversations.DeliveryPending {
			d.NextAttemptAt = &at
		}
		return d
	}
	ds := map[string]conversations.WebhookDelivery{
		"old succeeded":    delivery(conversations.DeliverySucceeded, old),
		"old failed":       delivery(conversations.DeliveryFailed, old),
		"old pending":      delivery(conversations.DeliveryPending, old),
		"old retried":      delivery(conversations.DeliveryFailed, old),
		"recent succeeded": delivery(conversations.DeliverySucceeded, recent),
		"recent failed":    delivery(conversations.DeliveryFailed, recent),
		"recent pending":   delivery(conversations.DeliveryPending, recent),
	}
	if err := store.InsertDeliveries(ctx, slices.Collect(maps.Values(ds))); err != nil {
		t.Fatal(err)
	}
	// An operator's retry sets an old failed one back to pending.
	if ok, err := store.RequeueDelivery(ctx, client.AccountID, e.ID, ds["old retried"].ID, now); err != nil || !ok {
		t.Fatalf("requeue: %v %v", ok, err)
	}
	// Budgets: one whose window ended two hours ago, one running.
	for _, at := range []time.Time{now.Add(-2 * time.Hour), now.Add(-30 * time.Second)} {
		if _, err := store.TakeQuota(ctx, e.ID+at.String(), "test", at, time.Minute, 10); err != nil {
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
	if left, err := db.Collection("webhook_quotas").CountDocuments(ctx, bson.D{}); err != nil || left != 1 {
		t.Errorf("%d budgets left (%v), want the running one", left, err)
	}
	// A second purge finds nothing more.
	if n, err := wh.PurgeDeliveries(ctx, now, retention); err != nil || n != 0 {
		t.Errorf("second purge: %d, %v", n, err)
	}
}
