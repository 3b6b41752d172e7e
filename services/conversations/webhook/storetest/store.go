package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook"
)

// The store's own promises, called directly: every call that names an
// account reads and writes that account's documents only, and the
// conditional writes hold.

var t0 = time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)

// insertEndpoint stores an enabled endpoint of accountID created at.
func insertEndpoint(t *testing.T, store Store, accountID string, at time.Time) webhook.Endpoint {
	t.Helper()
	e := webhook.Endpoint{
		ID: webhook.NewEndpointID(), AccountID: accountID, URL: "https://hooks.example.com/in",
		Events: []string{webhook.EventTypeAll}, Description: "", Enabled: true,
		CreatedAt: at, UpdatedAt: at, Version: 1,
		Secrets: []webhook.SealedSecret{{Sealed: []byte("sealed")}},
	}
	if err := store.InsertEndpoint(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	return e
}

// pendingDelivery is a webhook.test delivery to e, due at.
func pendingDelivery(e webhook.Endpoint, at time.Time) webhook.Delivery {
	return webhook.Delivery{
		ID: webhook.NewDeliveryID(), AccountID: e.AccountID, EndpointID: e.ID,
		EventID: conversations.NewEventID(), EventType: webhook.EventTypeTest, EventTime: at, Payload: []byte(`{}`),
		State: webhook.DeliveryPending, NextAttemptAt: &at, CreatedAt: at, UpdatedAt: at,
	}
}

func testEndpointScope(t *testing.T, store Store) {
	ctx := context.Background()
	e := insertEndpoint(t, store, "acc_owner", t0)
	const other = "acc_other"

	if _, err := store.FindEndpoint(ctx, other, e.ID); !errors.Is(err, webhook.ErrEndpointNotFound) {
		t.Errorf("FindEndpoint from another account: %v, want ErrEndpointNotFound", err)
	}
	if got, err := store.FindEndpoint(ctx, e.AccountID, e.ID); err != nil || got.ID != e.ID || got.URL != e.URL || !got.Enabled {
		t.Fatalf("FindEndpoint: %+v %v", got, err)
	}
	if n, err := store.CountEndpoints(ctx, other); err != nil || n != 0 {
		t.Errorf("CountEndpoints of another account: %d %v", n, err)
	}
	if page, err := store.ListEndpoints(ctx, other, 10, nil); err != nil || len(page.Endpoints) != 0 {
		t.Errorf("ListEndpoints of another account: %+v %v", page.Endpoints, err)
	}
	found, err := store.FindEndpoints(ctx, []webhook.EndpointRef{{AccountID: other, ID: e.ID}})
	if err != nil || len(found) != 0 {
		t.Errorf("FindEndpoints with another account: %+v %v", found, err)
	}
	found, err = store.FindEndpoints(ctx, []webhook.EndpointRef{{AccountID: e.AccountID, ID: e.ID}, {AccountID: other, ID: webhook.NewEndpointID()}})
	if err != nil || len(found) != 1 || found[0].ID != e.ID {
		t.Errorf("FindEndpoints: %+v %v", found, err)
	}

	// Writes naming another account change nothing.
	stolen := e
	stolen.AccountID, stolen.URL, stolen.Version = other, "https://evil.example.com/", 2
	if ok, err := store.SaveEndpoint(ctx, stolen, 1); err != nil || ok {
		t.Errorf("SaveEndpoint into another account: %v %v", ok, err)
	}
	if _, err := store.MarkEndpointFailing(ctx, other, e.ID, t0); !errors.Is(err, conversations.ErrNotFound) {
		t.Errorf("MarkEndpointFailing from another account: %v, want not found", err)
	}
	if ok, err := store.DisableEndpoint(ctx, other, e.ID, "stolen", t0); err != nil || ok {
		t.Errorf("DisableEndpoint from another account: %v %v", ok, err)
	}
	if ok, err := store.ReleaseFanout(ctx, other, e.ID, "", 99, t0); err != nil || ok {
		t.Errorf("ReleaseFanout from another account: %v %v", ok, err)
	}
	if ok, err := store.DeleteEndpoint(ctx, other, e.ID); err != nil || ok {
		t.Errorf("DeleteEndpoint from another account: %v %v", ok, err)
	}
	got, err := store.FindEndpoint(ctx, e.AccountID, e.ID)
	if err != nil || got.URL != e.URL || !got.Enabled || got.FailingSince != nil || got.EventCursor != 0 || got.Version != 1 {
		t.Fatalf("after another account's writes: %+v %v", got, err)
	}

	// The owner's: failing, healthy, disabled, deleted.
	failing, err := store.MarkEndpointFailing(ctx, e.AccountID, e.ID, t0)
	if err != nil || failing.FailingSince == nil || !failing.FailingSince.Equal(t0) {
		t.Fatalf("MarkEndpointFailing: %+v %v", failing, err)
	}
	// A later failure keeps the first one's time.
	if again, err := store.MarkEndpointFailing(ctx, e.AccountID, e.ID, t0.Add(time.Hour)); err != nil || !again.FailingSince.Equal(t0) {
		t.Fatalf("MarkEndpointFailing again: %+v %v", again, err)
	}
	if err := store.MarkEndpointHealthy(ctx, other, e.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.FindEndpoint(ctx, e.AccountID, e.ID); got.FailingSince == nil {
		t.Error("MarkEndpointHealthy from another account cleared failing_since")
	}
	if err := store.MarkEndpointHealthy(ctx, e.AccountID, e.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.FindEndpoint(ctx, e.AccountID, e.ID); got.FailingSince != nil {
		t.Error("MarkEndpointHealthy left failing_since")
	}
	if ok, err := store.DisableEndpoint(ctx, e.AccountID, e.ID, "gone", t0); err != nil || !ok {
		t.Fatalf("DisableEndpoint: %v %v", ok, err)
	}
	if ok, _ := store.DisableEndpoint(ctx, e.AccountID, e.ID, "again", t0); ok {
		t.Error("a disabled endpoint was disabled again")
	}
	got, _ = store.FindEndpoint(ctx, e.AccountID, e.ID)
	if got.Enabled || got.DisabledReason == nil || *got.DisabledReason != "gone" || got.Version != 2 {
		t.Errorf("after DisableEndpoint: %+v", got)
	}
	if ok, err := store.DeleteEndpoint(ctx, e.AccountID, e.ID); err != nil || !ok {
		t.Fatalf("DeleteEndpoint: %v %v", ok, err)
	}
	if _, err := store.FindEndpoint(ctx, e.AccountID, e.ID); !errors.Is(err, webhook.ErrEndpointNotFound) {
		t.Errorf("after delete: %v", err)
	}
}

func testDeliveryScope(t *testing.T, store Store) {
	ctx := context.Background()
	e := insertEndpoint(t, store, "acc_owner", t0)
	d := pendingDelivery(e, t0)
	if err := store.InsertDeliveries(ctx, []webhook.Delivery{d}); err != nil {
		t.Fatal(err)
	}
	const other = "acc_other"
	if page, err := store.ListDeliveries(ctx, other, e.ID, 10, nil); err != nil || len(page.Deliveries) != 0 {
		t.Errorf("ListDeliveries of another account: %+v %v", page.Deliveries, err)
	}
	if ok, err := store.RequeueDelivery(ctx, other, e.ID, d.ID, t0); err != nil || ok {
		t.Errorf("RequeueDelivery from another account: %v %v", ok, err)
	}
	// A claim or an outcome naming another account takes nothing.
	stolen := d
	stolen.AccountID = other
	if ids, err := store.ClaimDeliveries(ctx, []webhook.Delivery{stolen}, t0, t0.Add(time.Minute), "thief"); err != nil || len(ids) != 0 {
		t.Errorf("ClaimDeliveries under another account: %v %v", ids, err)
	}
	ids, err := store.ClaimDeliveries(ctx, []webhook.Delivery{d}, t0, t0.Add(time.Minute), "owner")
	if err != nil || !slices.Equal(ids, []string{d.ID}) {
		t.Fatalf("ClaimDeliveries: %v %v", ids, err)
	}
	outcome := webhook.AttemptOutcome{State: webhook.DeliverySucceeded, DurationMs: 5, At: t0.Add(time.Second)}
	recorded, err := store.FinishAttempts(ctx, []webhook.AttemptRecord{{AccountID: other, ID: d.ID, Claim: "owner", Outcome: outcome}})
	if err != nil || len(recorded) != 1 || recorded[0] {
		t.Errorf("FinishAttempts under another account: %v %v", recorded, err)
	}
	recorded, err = store.FinishAttempts(ctx, []webhook.AttemptRecord{{AccountID: e.AccountID, ID: d.ID, Claim: "owner", Outcome: outcome}})
	if err != nil || len(recorded) != 1 || !recorded[0] {
		t.Fatalf("FinishAttempts: %v %v", recorded, err)
	}
	page, err := store.ListDeliveries(ctx, e.AccountID, e.ID, 10, nil)
	if err != nil || len(page.Deliveries) != 1 {
		t.Fatalf("ListDeliveries: %+v %v", page.Deliveries, err)
	}
	if got := page.Deliveries[0]; got.State != webhook.DeliverySucceeded || got.Attempts != 1 || got.Claim != "" {
		t.Errorf("after its attempt: %+v", got)
	}
}

func testOneDeliveryPerEvent(t *testing.T, store Store) {
	ctx := context.Background()
	e := insertEndpoint(t, store, "acc_once", t0)
	d := pendingDelivery(e, t0)
	again := d
	again.ID = webhook.NewDeliveryID()
	fresh := pendingDelivery(e, t0)
	if err := store.InsertDeliveries(ctx, []webhook.Delivery{d}); err != nil {
		t.Fatal(err)
	}
	// A fan-out repeated after a lost lease inserts the same event again,
	// beside a new one: only the new one is stored.
	if err := store.InsertDeliveries(ctx, []webhook.Delivery{again, fresh}); err != nil {
		t.Fatalf("a repeated delivery is not an error: %v", err)
	}
	page, err := store.ListDeliveries(ctx, e.AccountID, e.ID, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range page.Deliveries {
		got = append(got, x.ID)
	}
	slices.Sort(got)
	want := []string{d.ID, fresh.ID}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("stored %v, want %v", got, want)
	}
}

func testEndpointPaging(t *testing.T, store Store) {
	ctx := context.Background()
	var want []string
	for i := range 5 {
		e := insertEndpoint(t, store, "acc_pages", t0.Add(time.Duration(i)*time.Minute))
		want = append([]string{e.ID}, want...) // newest first
	}
	insertEndpoint(t, store, "acc_elsewhere", t0.Add(time.Hour))
	var got []string
	var after *conversations.Position
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		page, err := store.ListEndpoints(ctx, "acc_pages", 2, after)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Endpoints {
			got = append(got, e.ID)
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages %v, want %v", got, want)
	}
}

func testSaveEndpointCAS(t *testing.T, store Store) {
	ctx := context.Background()
	e := insertEndpoint(t, store, "acc_cas", t0)
	first, second := e, e
	first.Description, first.Version = "first", 2
	second.Description, second.Version = "second", 2
	if ok, err := store.SaveEndpoint(ctx, first, 1); err != nil || !ok {
		t.Fatalf("first save: %v %v", ok, err)
	}
	if ok, err := store.SaveEndpoint(ctx, second, 1); err != nil || ok {
		t.Fatalf("a save from a stale version won: %v %v", ok, err)
	}
	if got, _ := store.FindEndpoint(ctx, e.AccountID, e.ID); got.Description != "first" || got.Version != 2 {
		t.Errorf("stored %+v", got)
	}
}

func testQuota(t *testing.T, store Store) {
	ctx := context.Background()
	take := func(account, endpoint string, at time.Time) time.Duration {
		t.Helper()
		wait, err := store.TakeQuota(ctx, account, endpoint, "test", at, time.Minute, 2)
		if err != nil {
			t.Fatal(err)
		}
		return wait
	}
	endpoint := webhook.NewEndpointID()
	if take("acc_a", endpoint, t0) != 0 || take("acc_a", endpoint, t0.Add(10*time.Second)) != 0 {
		t.Fatal("a budget of two refused one of its first two")
	}
	if wait := take("acc_a", endpoint, t0.Add(20*time.Second)); wait != 40*time.Second {
		t.Errorf("the third in the window waits %v, want the rest of the window (40s)", wait)
	}
	// Another account's budget is its own, even for the same id.
	if wait := take("acc_b", endpoint, t0.Add(20*time.Second)); wait != 0 {
		t.Errorf("another account's request was charged to this one: wait %v", wait)
	}
	// The next window starts afresh.
	if wait := take("acc_a", endpoint, t0.Add(time.Minute)); wait != 0 {
		t.Errorf("a new window waits %v", wait)
	}
}

func testFanoutLease(t *testing.T, store Store) {
	ctx := context.Background()
	older := insertEndpoint(t, store, "acc_fan", t0)
	newer := insertEndpoint(t, store, "acc_fan", t0.Add(time.Second))
	off := insertEndpoint(t, store, "acc_fan", t0.Add(-time.Hour))
	if ok, err := store.DisableEndpoint(ctx, off.AccountID, off.ID, "off", t0); err != nil || !ok {
		t.Fatal(err)
	}
	now := t0.Add(time.Minute)
	// The enabled endpoint looked at longest ago first, each once within
	// its lease; a disabled one never.
	e, ok, err := store.ClaimFanout(ctx, now, now.Add(time.Minute), "one")
	if err != nil || !ok || e.ID != older.ID || e.AccountID != older.AccountID {
		t.Fatalf("first claim: %+v %v %v", e, ok, err)
	}
	e2, ok, err := store.ClaimFanout(ctx, now, now.Add(time.Minute), "two")
	if err != nil || !ok || e2.ID != newer.ID {
		t.Fatalf("second claim: %+v %v %v", e2, ok, err)
	}
	if _, ok, _ := store.ClaimFanout(ctx, now, now.Add(time.Minute), "three"); ok {
		t.Fatal("an endpoint was claimed within another's lease, or a disabled one")
	}
	// Only its claim releases it, and the cursor moves forward only.
	if ok, _ := store.ReleaseFanout(ctx, e.AccountID, e.ID, "two", 5, now); ok {
		t.Error("another claim released the endpoint")
	}
	if ok, err := store.ReleaseFanout(ctx, e.AccountID, e.ID, "one", 5, now); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if got, _ := store.FindEndpoint(ctx, e.AccountID, e.ID); got.EventCursor != 5 {
		t.Errorf("cursor %d after release, want 5", got.EventCursor)
	}
	back, ok, err := store.ClaimFanout(ctx, now, now.Add(time.Minute), "four")
	if err != nil || !ok || back.ID != e.ID {
		t.Fatalf("claim after release: %+v %v %v", back, ok, err)
	}
	if ok, _ := store.ReleaseFanout(ctx, back.AccountID, back.ID, "four", 3, now); ok {
		t.Error("a release moved the cursor backwards")
	}
	if got, _ := store.FindEndpoint(ctx, e.AccountID, e.ID); got.EventCursor != 5 {
		t.Errorf("cursor %d, want 5", got.EventCursor)
	}
}
