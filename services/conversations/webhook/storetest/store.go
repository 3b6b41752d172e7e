package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
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
	if err := store.AdvanceCursors(ctx, []webhook.CursorMove{{AccountID: other, EndpointID: e.ID, Cursor: 99}}); err != nil {
		t.Errorf("AdvanceCursors from another account: %v", err)
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

// testFanOutCursors: the fan-out reads the endpoints of accounts,
// enabled or not; the sweep the enabled ones of some slots; a cursor only
// moves forward.
func testFanOutCursors(t *testing.T, store Store) {
	ctx := context.Background()
	a := insertEndpoint(t, store, "acc_sweep_a", t0)
	off := insertEndpoint(t, store, "acc_sweep_a", t0.Add(time.Second))
	b := insertEndpoint(t, store, "acc_sweep_b", t0)
	if ok, err := store.DisableEndpoint(ctx, off.AccountID, off.ID, "off", t0); err != nil || !ok {
		t.Fatal(err)
	}
	ids := func(es []webhook.Endpoint) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.ID)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	if got, err := store.EndpointsOf(ctx, []string{"acc_sweep_a"}); err != nil || !slices.Equal(ids(got), sorted(a.ID, off.ID)) {
		t.Errorf("EndpointsOf: %v %v", ids(got), err)
	}
	if got, err := store.EnabledEndpoints(ctx, nil); err != nil || !slices.Equal(ids(got), sorted(a.ID, b.ID)) {
		t.Errorf("EnabledEndpoints of every account: %v %v", ids(got), err)
	}
	// A store may return other slots' endpoints too; it must return
	// those of the slots asked.
	got, err := store.EnabledEndpoints(ctx, []int{conversations.PendingSlot("acc_sweep_b")})
	if err != nil || !slices.Contains(ids(got), b.ID) || slices.Contains(ids(got), off.ID) {
		t.Errorf("EnabledEndpoints of acc_sweep_b's slot: %v %v", ids(got), err)
	}
	move := func(c int64) {
		t.Helper()
		if err := store.AdvanceCursors(ctx, []webhook.CursorMove{{AccountID: a.AccountID, EndpointID: a.ID, Cursor: c}}); err != nil {
			t.Fatal(err)
		}
	}
	move(5)
	move(3)
	if got, _ := store.FindEndpoint(ctx, a.AccountID, a.ID); got.EventCursor != 5 {
		t.Errorf("cursor %d after 5 then 3, want 5", got.EventCursor)
	}
}

// testFanOutSweep: a sweep fans out only the accounts of the slots its
// replica holds, and fan-outs repeated by two replicas (a partition
// changing hands) store each delivery once and never move a cursor back.
func testFanOutSweep(t *testing.T, store Store) {
	ctx := context.Background()
	box, err := webhook.NewSecretBox([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	wh := &webhook.Service{Store: store, Events: store, Box: box}
	svc := &conversations.Service{Store: store}
	relay := &conversations.Relay{Store: store}
	url := "https://hooks.example.com/in"
	accounts := []string{"acc_sweep_a", "acc_sweep_b"} // slots 73 and 16
	endpoints := map[string]string{}
	for _, account := range accounts {
		client := conversations.Caller{AccountID: account, ID: "cli_sweep", Client: true}
		e, _, err := wh.CreateEndpoint(ctx, client, webhook.NewEndpoint{URL: &url})
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
	if _, err := wh.FanOutSweep(ctx, []int{conversations.PendingSlot(accounts[0])}); err != nil {
		t.Fatal(err)
	}
	if a, b := count(accounts[0]), count(accounts[1]); a != 3 || b != 0 {
		t.Fatalf("a sweep holding only %s: deliveries %d and %d, want 3 and 0", accounts[0], a, b)
	}
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
	for _, account := range accounts {
		e, err := store.FindEndpoint(ctx, account, endpoints[account])
		if err != nil || e.EventCursor != 3 {
			t.Fatalf("%s: cursor %d %v, want 3", account, e.EventCursor, err)
		}
	}
}
