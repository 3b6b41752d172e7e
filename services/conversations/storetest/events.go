package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/conversations"
)

// The events: recorded with each change, never lost and
// never invented whatever step stops, one order per account.

func relay(t *testing.T, s *conversations.Service) {
	t.Helper()
	r := &conversations.Relay{Store: s.Store}
	if _, err := r.RelayOnce(context.Background()); err != nil {
		t.Fatalf("relay: %v", err)
	}
}

// feed reads every event who may see after after, types filtered, in
// pages of limit, checking each page's order and Next.
func feed(t *testing.T, s *conversations.Service, who conversations.Caller, after int64, limit int, types ...conversations.EventType) []conversations.Event {
	t.Helper()
	var all []conversations.Event
	for range 1000 {
		page, err := s.ListEvents(context.Background(), conversations.EventQuery{Caller: who, After: &after, Types: types, Limit: limit})
		if err != nil {
			t.Fatalf("ListEvents after %d: %v", after, err)
		}
		for _, e := range page.Events {
			if e.Sequence <= after || e.Sequence > page.Next {
				t.Fatalf("event %d outside (%d, %d]", e.Sequence, after, page.Next)
			}
			after = e.Sequence
		}
		all = append(all, page.Events...)
		if page.Next < after {
			t.Fatalf("next %d before the last event %d", page.Next, after)
		}
		after = page.Next
		if len(page.Events) < limit {
			return all
		}
	}
	t.Fatal("the feed never ended")
	return nil
}

func types(events []conversations.Event) []conversations.EventType {
	out := make([]conversations.EventType, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

func data(t *testing.T, e conversations.Event) conversations.EventData {
	t.Helper()
	d, err := e.DecodeData()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// onceInOrder fails unless events hold each of want's ids exactly once,
// in increasing sequence.
func onceInOrder(t *testing.T, events []conversations.Event, wantCount int) {
	t.Helper()
	seen := map[string]bool{}
	for i, e := range events {
		if seen[e.ID] {
			t.Fatalf("event %s served twice", e.ID)
		}
		seen[e.ID] = true
		if i > 0 && e.Sequence <= events[i-1].Sequence {
			t.Fatalf("sequence %d after %d", e.Sequence, events[i-1].Sequence)
		}
	}
	if len(events) != wantCount {
		t.Fatalf("%d events, want %d: %v", len(events), wantCount, types(events))
	}
}

// testEventsOfEveryChange: each change records the contract's event, with
// the data after the change; a repeat that changes nothing records none.
func testEventsOfEveryChange(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	alice, cli := caller("acc_1", "usr_a"), client("acc_1", "cli_1")
	c := create(t, s, "acc_1", "hello", conversations.StatusOpen, "usr_a")
	if _, err := s.UpdateConversation(ctx, alice, c.ID, conversations.Patch{Subject: ptr("hi"), Status: ptr(conversations.StatusSnoozed)}, conversations.Precondition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateConversation(ctx, alice, c.ID, conversations.Patch{Subject: ptr("hi")}, conversations.Precondition{}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the repeat records nothing
		if _, err := s.AddParticipant(ctx, alice, c.ID, "usr_b", conversations.Precondition{}); err != nil {
			t.Fatal(err)
		}
	}
	m := post(t, s, alice, c.ID, "wake up") // reopens: message.created and conversation.updated
	for range 2 {
		if _, err := s.RemoveParticipant(ctx, alice, c.ID, "usr_b", conversations.Precondition{}); err != nil {
			t.Fatal(err)
		}
	}
	relay(t, s)
	events := feed(t, s, cli, 0, 100)
	want := []conversations.EventType{
		conversations.EventConversationCreated, conversations.EventConversationUpdated, conversations.EventParticipantAdded,
		conversations.EventMessageCreated, conversations.EventConversationUpdated, conversations.EventParticipantRemoved,
	}
	if !slices.Equal(types(events), want) {
		t.Fatalf("types %v, want %v", types(events), want)
	}
	onceInOrder(t, events, len(want))
	if d := data(t, events[1]); d.Conversation.Subject != "hi" || d.Conversation.Status != conversations.StatusSnoozed ||
		fmt.Sprint(d.Changes) != "map[status:open subject:hello]" {
		t.Fatalf("updated: %+v", d)
	}
	if d := data(t, events[2]); d.UserID != "usr_b" || !slices.Contains(d.Conversation.Participants, "usr_b") {
		t.Fatalf("added: %+v", d)
	}
	if d := data(t, events[3]); d.Message == nil || d.Message.ID != m.ID || d.Message.Body != "wake up" ||
		d.Conversation.LastMessageAt == nil || !d.Conversation.LastMessageAt.Equal(m.CreatedAt) || !events[3].Timestamp.Equal(m.CreatedAt) {
		t.Fatalf("message: %+v", d)
	}
	if d := data(t, events[4]); fmt.Sprint(d.Changes) != "map[status:snoozed]" || d.Conversation.Status != conversations.StatusOpen {
		t.Fatalf("reopened: %+v", d)
	}
	if d := data(t, events[5]); d.UserID != "usr_b" || slices.Contains(d.Conversation.Participants, "usr_b") {
		t.Fatalf("removed: %+v", d)
	}
	for _, e := range events {
		if e.ID[:4] != "evt_" || e.Timestamp.IsZero() || e.AccountID != "acc_1" {
			t.Fatalf("event %+v", e)
		}
		var wire map[string]any
		b, _ := json.Marshal(e)
		if err := json.Unmarshal(b, &wire); err != nil || len(wire) != 5 || wire["data"] == nil {
			t.Fatalf("wire form %s: %v", b, err)
		}
	}
	// Filtered by type, continued from a position.
	if got := feed(t, s, cli, events[1].Sequence, 1, conversations.EventConversationUpdated); len(got) != 1 || got[0].ID != events[4].ID {
		t.Fatalf("updated after %d: %v", events[1].Sequence, types(got))
	}
	// Another account sees none of it.
	if got := feed(t, s, client("acc_2", "cli_2"), 0, 100); len(got) != 0 {
		t.Fatalf("another account: %v", types(got))
	}
}

// testFailedChangesRecordNothing: a change refused, or lost to another,
// records no event.
func testFailedChangesRecordNothing(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	alice := caller("acc_1", "usr_a")
	c := create(t, s, "acc_1", "", conversations.StatusClosed, "usr_a")
	if _, err := s.PostMessage(ctx, alice, conversations.Message{ConversationID: c.ID, Body: "x"}); !errors.Is(err, conversations.ErrConversationClosed) {
		t.Fatalf("post to closed: %v", err)
	}
	stale := conversations.Precondition{Given: true, Versions: []int64{c.Version + 7}}
	if _, err := s.UpdateConversation(ctx, alice, c.ID, conversations.Patch{Subject: ptr("x")}, stale); !errors.Is(err, conversations.ErrPreconditionFailed) {
		t.Fatalf("stale: %v", err)
	}
	if _, err := s.RemoveParticipant(ctx, alice, c.ID, "usr_a", conversations.Precondition{}); !errors.Is(err, conversations.ErrLastParticipant) {
		t.Fatalf("last: %v", err)
	}
	if _, err := s.UpdateConversation(ctx, caller("acc_1", "usr_x"), c.ID, conversations.Patch{Subject: ptr("x")}, conversations.Precondition{}); !errors.Is(err, conversations.ErrNotFound) {
		t.Fatalf("stranger: %v", err)
	}
	// A compare-and-set lost to another change stores nothing of its own.
	next := c
	next.Subject, next.Version = "lost", c.Version+1
	if won, err := s.Store.SaveConversation(ctx, conversations.Change{From: c, To: next, Events: []conversations.Event{{
		ID: conversations.NewEventID(), AccountID: "acc_1", Type: conversations.EventConversationUpdated, Timestamp: time.Now(),
	}}}); err != nil || !won {
		t.Fatalf("first: %v %v", won, err)
	}
	if won, err := s.Store.SaveConversation(ctx, conversations.Change{From: c, To: next, Events: []conversations.Event{{
		ID: conversations.NewEventID(), AccountID: "acc_1", Type: conversations.EventConversationUpdated, Timestamp: time.Now(),
	}}}); err != nil || won {
		t.Fatalf("second from the same version: %v %v", won, err)
	}
	// A create retried with the stored id records nothing again.
	if _, err := s.CreateConversation(ctx, alice, conversations.Conversation{ID: c.ID, Subject: "again", Status: conversations.StatusOpen, Participants: []string{"usr_a"}}); err != nil {
		t.Fatal(err)
	}
	relay(t, s)
	if got := types(feed(t, s, client("acc_1", "cli"), 0, 100)); !slices.Equal(got, []conversations.EventType{conversations.EventConversationCreated, conversations.EventConversationUpdated}) {
		t.Fatalf("events %v: want the creation and the one stored change", got)
	}
}

// testEventsSurviveAStopAtEachStep stops the work at each step and shows
// that every event appears exactly once after recovery: after the change
// before the relay ran; after the relay copied some of a document's events;
// after it copied all of them but before it cleared them; and a consumer
// whose read stopped before it kept its position.
func testEventsSurviveAStopAtEachStep(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	alice, cli := caller("acc_1", "usr_a"), client("acc_1", "cli")
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_a")
	for i := range 3 {
		if _, err := s.UpdateConversation(ctx, alice, c.ID, conversations.Patch{Subject: ptr(fmt.Sprint(i))}, conversations.Precondition{}); err != nil {
			t.Fatal(err)
		}
	}
	post(t, s, alice, c.ID, "m")
	// Stopped after the changes: nothing copied, nothing served, nothing lost.
	if got := feed(t, s, cli, 0, 100); len(got) != 0 {
		t.Fatalf("served before the relay: %v", types(got))
	}
	pending, err := s.Store.FindPending(ctx, nil, time.Now().Add(time.Hour), 100)
	if err != nil || len(pending) != 2 || len(pending[0].Events) != 4 {
		t.Fatalf("pending: %+v, %v", pending, err)
	}
	// Stopped while ordering: two of the conversation's events copied.
	for i, e := range pending[0].Events[:2] {
		e.Sequence = int64(i + 1)
		if err := s.Store.AppendEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// A copy of an event already copied is refused by its id.
	again := pending[0].Events[0]
	again.Sequence = 10
	if err := s.Store.AppendEvent(ctx, again); !errors.Is(err, conversations.ErrDuplicateID) {
		t.Fatalf("second copy: %v", err)
	}
	taken := pending[1].Events[0]
	taken.Sequence = 2
	if err := s.Store.AppendEvent(ctx, taken); !errors.Is(err, conversations.ErrSequenceTaken) {
		t.Fatalf("taken number: %v", err)
	}
	// A consumer reads the part ordered so far.
	first := feed(t, s, cli, 0, 100)
	if len(first) != 2 {
		t.Fatalf("partly ordered: %v", types(first))
	}
	// Stopped after copying everything, before clearing: a new relay
	// finds them pending again, copies nothing twice, and clears them.
	for i, e := range slices.Concat(pending[0].Events[2:], pending[1].Events) {
		e.Sequence = int64(3 + i)
		if err := s.Store.AppendEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	relay(t, s)
	if left, err := s.Store.FindPending(ctx, nil, time.Now().Add(time.Hour), 100); err != nil || len(left) != 0 {
		t.Fatalf("still pending: %+v, %v", left, err)
	}
	// The consumer stopped before storing its position: it reads again
	// from the last one it kept, and gets the rest once.
	rest := feed(t, s, cli, first[len(first)-1].Sequence, 1)
	onceInOrder(t, slices.Concat(first, rest), 5)
	// And a change stored while a relay had read the document keeps its
	// event: the clear of the old state does not match.
	pending = nil
	if _, err := s.UpdateConversation(ctx, alice, c.ID, conversations.Patch{Subject: ptr("late")}, conversations.Precondition{}); err != nil {
		t.Fatal(err)
	}
	if pending, err = s.Store.FindPending(ctx, nil, time.Now().Add(time.Hour), 100); err != nil || len(pending) != 1 {
		t.Fatalf("pending: %+v, %v", pending, err)
	}
	if _, err := s.UpdateConversation(ctx, alice, c.ID, conversations.Patch{Subject: ptr("later")}, conversations.Precondition{}); err != nil {
		t.Fatal(err)
	}
	if cleared, err := s.Store.ClearPending(ctx, pending[0].Source); err != nil || cleared {
		t.Fatalf("cleared a changed document: %v, %v", cleared, err)
	}
	relay(t, s)
	onceInOrder(t, feed(t, s, cli, 0, 3), 7)
}

// testPendingStopsAtTheHorizon: FindPending leaves out the documents
// whose oldest pending event is stamped at or after its horizon, so that a
// relay never takes a change without the changes it follows (see
// conversations.Relay): a conversation created at t and a message posted
// to it a second later.
func testPendingStopsAtTheHorizon(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *conversations.Service {
		return &conversations.Service{Store: s.Store, Now: func() time.Time { return t0.Add(d) }}
	}
	alice := caller("acc_1", "usr_a")
	c, err := at(0).CreateConversation(ctx, alice, conversations.Conversation{Status: conversations.StatusOpen, Participants: []string{alice.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := at(time.Second).PostMessage(ctx, alice, conversations.Message{ConversationID: c.ID, Body: "m"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		before time.Time
		want   []conversations.EventType
	}{
		{t0, nil},
		{t0.Add(time.Millisecond), []conversations.EventType{conversations.EventConversationCreated}},
		{t0.Add(time.Second), []conversations.EventType{conversations.EventConversationCreated}},
		{t0.Add(time.Second + time.Millisecond), []conversations.EventType{conversations.EventConversationCreated, conversations.EventMessageCreated}},
	} {
		pending, err := s.Store.FindPending(ctx, nil, tc.before, 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []conversations.EventType
		for _, p := range pending {
			got = append(got, types(p.Events)...)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("pending before %v: %v, want %v", tc.before.Sub(t0), got, tc.want)
		}
	}
}

// testConcurrentRelaysKeepOneOrder: relays racing each other while changes
// are made give every event once, in one increasing order per account.
func testConcurrentRelaysKeepOneOrder(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	const writers, changes = 3, 6
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var relays sync.WaitGroup
	for range 3 {
		relays.Go(func() {
			r := &conversations.Relay{Store: s.Store}
			for {
				if _, err := r.RelayOnce(ctx); err != nil {
					t.Error(err)
					return
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	for w := range writers {
		wg.Go(func() {
			who := caller("acc_1", fmt.Sprint("usr_", w))
			c, err := s.CreateConversation(ctx, who, conversations.Conversation{Status: conversations.StatusOpen, Participants: []string{who.ID}})
			if err != nil {
				t.Error(err)
				return
			}
			for i := range changes {
				if _, err := s.PostMessage(ctx, who, conversations.Message{ConversationID: c.ID, Body: fmt.Sprint(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	relays.Wait()
	relay(t, s)
	events := feed(t, s, client("acc_1", "cli"), 0, 7)
	onceInOrder(t, events, writers*(1+changes))
	// Each conversation's events in the order of its changes.
	last := map[string]time.Time{}
	for _, e := range events {
		if e.Timestamp.Before(last[e.ConversationID]) {
			t.Fatalf("event of %s at %v after one at %v", e.ConversationID, e.Timestamp, last[e.ConversationID])
		}
		last[e.ConversationID] = e.Timestamp
	}
}

// testEventVisibility: a user sees the events of the conversations it
// took part in at the time (its own removal included, nothing after it),
// and its feed's position moves past what it may not see.
func testEventVisibility(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	alice, bob := caller("acc_1", "usr_a"), caller("acc_1", "usr_b")
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_a")
	post(t, s, alice, c.ID, "before bob")
	if _, err := s.AddParticipant(ctx, alice, c.ID, "usr_b", conversations.Precondition{}); err != nil {
		t.Fatal(err)
	}
	post(t, s, alice, c.ID, "with bob")
	if _, err := s.RemoveParticipant(ctx, alice, c.ID, "usr_b", conversations.Precondition{}); err != nil {
		t.Fatal(err)
	}
	post(t, s, alice, c.ID, "after bob")
	create(t, s, "acc_1", "", conversations.StatusOpen, "usr_a") // alice's only
	relay(t, s)
	all := feed(t, s, client("acc_1", "cli"), 0, 100)
	if len(all) != 7 {
		t.Fatalf("client: %v", types(all))
	}
	want := []conversations.EventType{conversations.EventParticipantAdded, conversations.EventMessageCreated, conversations.EventParticipantRemoved}
	if got := feed(t, s, bob, 0, 100); !slices.Equal(types(got), want) {
		t.Fatalf("bob: %v, want %v", types(got), want)
	}
	if got := feed(t, s, alice, 0, 2); len(got) != 7 {
		t.Fatalf("alice: %v", types(got))
	}
	// Bob's position moves to the newest event examined, though he saw
	// none of the last ones.
	page, err := s.ListEvents(ctx, conversations.EventQuery{Caller: bob, After: ptr(all[4].Sequence), Limit: 10})
	if err != nil || len(page.Events) != 0 || page.Next != all[6].Sequence {
		t.Fatalf("bob after the removal: %+v, %v", page, err)
	}
	page, err = s.ListEvents(ctx, conversations.EventQuery{Caller: client("acc_1", "cli"), After: ptr(all[6].Sequence + 5), Limit: 10})
	if err != nil || len(page.Events) != 0 || page.Next != all[6].Sequence+5 {
		t.Fatalf("after the newest: %+v, %v", page, err)
	}
}

// testEventPurge: the purge deletes old events through a recorded
// position, keeps each account's newest, and a position below it is
// ErrCursorExpired.
func testEventPurge(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	alice, cli := caller("acc_1", "usr_a"), client("acc_1", "cli")
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_a")
	for i := range 3 {
		post(t, s, alice, c.ID, fmt.Sprint(i))
	}
	relay(t, s)
	all := feed(t, s, cli, 0, 100)
	if n, err := s.PurgeEvents(ctx, time.Now(), time.Hour); err != nil || n != 0 {
		t.Fatalf("purge of young events: %d, %v", n, err)
	}
	n, err := s.PurgeEvents(ctx, time.Now().Add(2*time.Hour), time.Hour)
	if err != nil || n != 3 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	got := feed(t, s, cli, all[2].Sequence, 100)
	if len(got) != 1 || got[0].ID != all[3].ID {
		t.Fatalf("kept: %v", got)
	}
	if _, err := s.ListEvents(ctx, conversations.EventQuery{Caller: cli, After: ptr(all[2].Sequence - 1), Limit: 10}); !errors.Is(err, conversations.ErrCursorExpired) {
		t.Fatalf("below the purge: %v", err)
	}
	page, err := s.ListEvents(ctx, conversations.EventQuery{Caller: cli, Limit: 10})
	if err != nil || len(page.Events) != 1 || page.Next != all[3].Sequence {
		t.Fatalf("from the oldest kept: %+v, %v", page, err)
	}
	// Numbering goes on from the newest kept.
	post(t, s, alice, c.ID, "next")
	relay(t, s)
	if got := feed(t, s, cli, all[3].Sequence, 100); len(got) != 1 || got[0].Sequence <= all[3].Sequence {
		t.Fatalf("after the purge: %+v", got)
	}
}
