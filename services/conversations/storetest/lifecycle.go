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

func caller(accountID, id string) conversations.Caller {
	return conversations.Caller{AccountID: accountID, ID: id}
}

func ptr[T any](v T) *T { return &v }

func get(t *testing.T, s *conversations.Service, who conversations.Caller, id string) conversations.Conversation {
	t.Helper()
	c, err := s.GetConversation(context.Background(), who, id)
	if err != nil {
		t.Fatalf("GetConversation: %v", err)
	}
	return c
}

func post(t *testing.T, s *conversations.Service, who conversations.Caller, convID, body string) conversations.Message {
	t.Helper()
	m, err := s.PostMessage(context.Background(), who, conversations.Message{ConversationID: convID, Body: body})
	if err != nil {
		t.Fatalf("PostMessage: %v", err)
	}
	return m
}

func testUpdatedAfter(t *testing.T, s *conversations.Service) {
	var all []conversations.Conversation
	for i := range 8 {
		status := conversations.StatusOpen
		if i%2 == 0 {
			status = conversations.StatusClosed
		}
		all = append(all, create(t, s, "acc_1", fmt.Sprint(i), status, "usr_1"))
	}
	mark := all[3].UpdatedAt
	for _, status := range []conversations.Status{"", conversations.StatusClosed} {
		pages := listAll(t, s, conversations.ListQuery{Caller: caller("acc_1", "usr_1"), Status: status, UpdatedAfter: &mark, Limit: 2})
		got := slices.Concat(pages...)
		var want []string
		for _, c := range all {
			if c.UpdatedAt.After(mark) && (status == "" || c.Status == status) {
				want = append(want, c.ID)
			}
		}
		slices.Sort(want)
		gotIDs := ids(got)
		slices.Sort(gotIDs)
		if !slices.Equal(gotIDs, want) {
			t.Errorf("status %q updatedAfter %v: %v, want %v", status, mark, gotIDs, want)
		}
	}
}

func testCreateWithGivenID(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := caller("acc_1", "usr_1")
	id := conversations.NewConversationID()
	first, err := s.CreateConversation(ctx, who, conversations.Conversation{ID: id, AccountID: "acc_1", Subject: "first", Status: conversations.StatusOpen, Participants: []string{"usr_1"}})
	if err != nil || first.ID != id || first.Version == 0 {
		t.Fatalf("create with id: %+v, %v", first, err)
	}
	again, err := s.CreateConversation(ctx, who, conversations.Conversation{ID: id, AccountID: "acc_1", Subject: "second", Status: conversations.StatusOpen, Participants: []string{"usr_1"}})
	if err != nil || again.ID != id || again.Subject != "first" || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("create again with the id: %+v, %v", again, err)
	}
	if n := len(slices.Concat(listAll(t, s, conversations.ListQuery{Caller: who, Limit: 10})...)); n != 1 {
		t.Fatalf("%d conversations, want 1", n)
	}
}

func testUpdateConversation(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := caller("acc_1", "usr_1")
	c := create(t, s, "acc_1", "old", conversations.StatusOpen, "usr_1", "usr_2")
	got, err := s.UpdateConversation(ctx, who, c.ID, conversations.Patch{Subject: ptr("new"), Status: ptr(conversations.StatusSnoozed)}, conversations.Precondition{})
	if err != nil || got.Subject != "new" || got.Status != conversations.StatusSnoozed || got.Version != c.Version+1 ||
		!got.UpdatedAt.After(c.UpdatedAt) || !slices.Equal(got.Participants, c.Participants) || !got.CreatedAt.Equal(c.CreatedAt) {
		t.Fatalf("update: %+v, %v (from %+v)", got, err, c)
	}
	if stored := get(t, s, caller("acc_1", "usr_2"), c.ID); stored.Subject != "new" || stored.Version != got.Version || !stored.UpdatedAt.Equal(got.UpdatedAt) {
		t.Fatalf("stored: %+v", stored)
	}
	// A patch that changes nothing writes nothing.
	same, err := s.UpdateConversation(ctx, who, c.ID, conversations.Patch{Subject: ptr("new")}, conversations.Precondition{})
	if err != nil || same.Version != got.Version || !same.UpdatedAt.Equal(got.UpdatedAt) {
		t.Fatalf("no-op update: %+v, %v", same, err)
	}
	stale := conversations.Precondition{Given: true, Versions: []int64{c.Version}}
	if _, err := s.UpdateConversation(ctx, who, c.ID, conversations.Patch{Subject: ptr("lost")}, stale); !errors.Is(err, conversations.ErrPreconditionFailed) {
		t.Fatalf("stale precondition: %v", err)
	}
	current := conversations.Precondition{Given: true, Versions: []int64{99, got.Version}}
	if _, err := s.UpdateConversation(ctx, who, c.ID, conversations.Patch{Subject: ptr("kept")}, current); err != nil {
		t.Fatalf("current precondition: %v", err)
	}
	if _, err := s.UpdateConversation(ctx, who, c.ID, conversations.Patch{Status: ptr(conversations.StatusClosed)}, conversations.Precondition{Given: true, Any: true}); err != nil {
		t.Fatalf("precondition *: %v", err)
	}
	if final := get(t, s, who, c.ID); final.Subject != "kept" || final.Status != conversations.StatusClosed || final.Version != got.Version+2 {
		t.Fatalf("final: %+v", final)
	}
}

// testPreconditionRace: writers holding one version change the conversation
// at once; exactly one succeeds, the others get ErrPreconditionFailed.
func testPreconditionRace(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := caller("acc_1", "usr_1")
	for round := range 5 {
		c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
		cond := conversations.Precondition{Given: true, Versions: []int64{c.Version}}
		const n = 6
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, errs[i] = s.UpdateConversation(ctx, who, c.ID, conversations.Patch{Subject: ptr(fmt.Sprint("writer ", i))}, cond)
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, conversations.ErrPreconditionFailed):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d writers won, want 1", round, won)
		}
		if got := get(t, s, who, c.ID); got.Version != c.Version+1 {
			t.Fatalf("round %d: version %d, want %d", round, got.Version, c.Version+1)
		}
	}
}

// testConcurrentChanges: changes without a precondition retry their
// compare-and-set, so none is lost.
func testConcurrentChanges(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := caller("acc_1", "usr_1")
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
	const n = 10
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := s.AddParticipant(ctx, who, c.ID, fmt.Sprint("usr_add_", i), conversations.Precondition{}); err != nil {
				t.Errorf("add %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	got := get(t, s, who, c.ID)
	if len(got.Participants) != n+1 || got.Version != c.Version+n {
		t.Fatalf("after %d concurrent adds: %d participants, version %d", n, len(got.Participants), got.Version)
	}
}

func testParticipants(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := caller("acc_1", "usr_1")
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
	added, err := s.AddParticipant(ctx, who, c.ID, "usr_2", conversations.Precondition{})
	if err != nil || !slices.Equal(added.Participants, []string{"usr_1", "usr_2"}) || !added.UpdatedAt.After(c.UpdatedAt) {
		t.Fatalf("add: %+v, %v", added, err)
	}
	if again, err := s.AddParticipant(ctx, who, c.ID, "usr_2", conversations.Precondition{}); err != nil || again.Version != added.Version {
		t.Fatalf("add again: %+v, %v", again, err)
	}
	if got := get(t, s, caller("acc_1", "usr_2"), c.ID); got.ID != c.ID {
		t.Fatal("the added participant cannot read it")
	}
	removed, err := s.RemoveParticipant(ctx, caller("acc_1", "usr_2"), c.ID, "usr_2", conversations.Precondition{})
	if err != nil || !slices.Equal(removed.Participants, []string{"usr_1"}) || !removed.UpdatedAt.After(added.UpdatedAt) {
		t.Fatalf("remove: %+v, %v", removed, err)
	}
	if _, err := s.GetConversation(ctx, caller("acc_1", "usr_2"), c.ID); !errors.Is(err, conversations.ErrNotFound) {
		t.Fatalf("a removed participant reads it: %v", err)
	}
	if again, err := s.RemoveParticipant(ctx, who, c.ID, "usr_2", conversations.Precondition{}); err != nil || again.Version != removed.Version {
		t.Fatalf("remove again: %+v, %v", again, err)
	}
	if _, err := s.RemoveParticipant(ctx, who, c.ID, "usr_1", conversations.Precondition{}); !errors.Is(err, conversations.ErrLastParticipant) {
		t.Fatalf("remove the last: %v", err)
	}
	many := []string{"usr_1"}
	for i := range conversations.MaxParticipants - 1 {
		many = append(many, fmt.Sprint("p", i))
	}
	full := create(t, s, "acc_1", "", conversations.StatusOpen, many...)
	if _, err := s.AddParticipant(ctx, who, full.ID, "one_more", conversations.Precondition{}); !errors.Is(err, conversations.ErrTooManyParticipants) {
		t.Fatalf("add a 101st: %v", err)
	}
	if got := get(t, s, who, full.ID); len(got.Participants) != conversations.MaxParticipants || got.Version != full.Version {
		t.Fatalf("refused add changed it: %d participants", len(got.Participants))
	}
	stale := conversations.Precondition{Given: true, Versions: []int64{c.Version}}
	if _, err := s.AddParticipant(ctx, who, c.ID, "usr_3", stale); !errors.Is(err, conversations.ErrPreconditionFailed) {
		t.Fatalf("add with a stale precondition: %v", err)
	}
	if _, err := s.RemoveParticipant(ctx, who, c.ID, "usr_1", stale); !errors.Is(err, conversations.ErrPreconditionFailed) {
		t.Fatalf("remove with a stale precondition: %v", err)
	}
}

// testChangeScope: every change and every message method treats another
// account's conversation, or one the caller does not take part in, as
// missing, and changes nothing.
func testChangeScope(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	c := create(t, s, "acc_1", "mine", conversations.StatusOpen, "usr_1")
	m := post(t, s, caller("acc_1", "usr_1"), c.ID, "hello")
	before := get(t, s, caller("acc_1", "usr_1"), c.ID)
	for _, who := range []conversations.Caller{caller("acc_2", "usr_1"), caller("acc_1", "usr_9")} {
		for name, op := range map[string]func() error{
			"update": func() error {
				_, err := s.UpdateConversation(ctx, who, c.ID, conversations.Patch{Subject: ptr("x")}, conversations.Precondition{})
				return err
			},
			"add": func() error {
				_, err := s.AddParticipant(ctx, who, c.ID, who.ID, conversations.Precondition{})
				return err
			},
			"remove": func() error {
				_, err := s.RemoveParticipant(ctx, who, c.ID, "usr_1", conversations.Precondition{})
				return err
			},
			"post": func() error {
				_, err := s.PostMessage(ctx, who, conversations.Message{ConversationID: c.ID, Body: "x"})
				return err
			},
			"list messages": func() error {
				_, err := s.ListMessages(ctx, conversations.MessageQuery{Caller: who, ConversationID: c.ID, Limit: 10})
				return err
			},
			"get message": func() error {
				_, err := s.GetMessage(ctx, who, c.ID, m.ID)
				return err
			},
		} {
			if err := op(); !errors.Is(err, conversations.ErrNotFound) {
				t.Errorf("%+v %s: %v, want ErrNotFound", who, name, err)
			}
		}
	}
	if after := get(t, s, caller("acc_1", "usr_1"), c.ID); after.Version != before.Version || after.Subject != "mine" {
		t.Fatalf("outsiders changed it: %+v", after)
	}
}

func testPostMessage(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := caller("acc_1", "usr_1")
	c := create(t, s, "acc_1", "", conversations.StatusSnoozed, "usr_1", "usr_2")
	m, err := s.PostMessage(ctx, who, conversations.Message{ConversationID: c.ID, Body: "hi", Metadata: []byte(`{"a":1}`)})
	if err != nil || m.ID == "" || m.Author != "usr_1" || m.AccountID != "acc_1" || string(m.Metadata) != `{"a":1}` || !m.CreatedAt.After(c.UpdatedAt) {
		t.Fatalf("post: %+v, %v", m, err)
	}
	got := get(t, s, caller("acc_1", "usr_2"), c.ID)
	if got.Status != conversations.StatusOpen || got.LastMessageAt == nil || !got.LastMessageAt.Equal(m.CreatedAt) ||
		!got.UpdatedAt.Equal(m.CreatedAt) || got.Version != c.Version+1 {
		t.Fatalf("after a post to a snoozed conversation: %+v, message at %v", got, m.CreatedAt)
	}
	one, err := s.GetMessage(ctx, caller("acc_1", "usr_2"), c.ID, m.ID)
	if err != nil || one.ID != m.ID || one.Body != "hi" || !one.CreatedAt.Equal(m.CreatedAt) || string(one.Metadata) != `{"a":1}` {
		t.Fatalf("get message: %+v, %v", one, err)
	}
	if _, err := s.UpdateConversation(ctx, who, c.ID, conversations.Patch{Status: ptr(conversations.StatusClosed)}, conversations.Precondition{}); err != nil {
		t.Fatal(err)
	}
	closed := get(t, s, who, c.ID)
	if _, err := s.PostMessage(ctx, who, conversations.Message{ConversationID: c.ID, Body: "late"}); !errors.Is(err, conversations.ErrConversationClosed) {
		t.Fatalf("post to a closed conversation: %v", err)
	}
	if after := get(t, s, who, c.ID); after.Version != closed.Version {
		t.Fatal("a refused post changed the conversation")
	}
	page, err := s.ListMessages(ctx, conversations.MessageQuery{Caller: who, ConversationID: c.ID, Limit: 10})
	if err != nil || len(page.Messages) != 1 || page.Next != nil {
		t.Fatalf("messages after the refused post: %+v, %v", page, err)
	}
	if _, err := s.GetMessage(ctx, who, c.ID, "msg_nope"); !errors.Is(err, conversations.ErrNotFound) {
		t.Fatalf("unknown message: %v", err)
	}
}

// testConcurrentPosts: lastMessageAt ends at the newest message and
// updatedAt never before it, however posts interleave.
func testConcurrentPosts(t *testing.T, s *conversations.Service) {
	who := caller("acc_1", "usr_1")
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
	const n = 10
	posted := make([]conversations.Message, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m, err := s.PostMessage(context.Background(), who, conversations.Message{ConversationID: c.ID, Body: fmt.Sprint(i)})
			if err != nil {
				t.Errorf("post %d: %v", i, err)
			}
			posted[i] = m
		})
	}
	wg.Wait()
	newest := posted[0].CreatedAt
	for _, m := range posted {
		if m.CreatedAt.After(newest) {
			newest = m.CreatedAt
		}
	}
	got := get(t, s, who, c.ID)
	if got.LastMessageAt == nil || !got.LastMessageAt.Equal(newest) || got.UpdatedAt.Before(newest) {
		t.Fatalf("after concurrent posts: %+v, newest %v", got, newest)
	}
}

func testPostWithGivenID(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := caller("acc_1", "usr_1")
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
	id := conversations.NewMessageID()
	first, err := s.PostMessage(ctx, who, conversations.Message{ID: id, ConversationID: c.ID, Body: "once"})
	if err != nil || first.ID != id {
		t.Fatalf("post with id: %+v, %v", first, err)
	}
	again, err := s.PostMessage(ctx, who, conversations.Message{ID: id, ConversationID: c.ID, Body: "once"})
	if err != nil || again.ID != id || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("post again with the id: %+v, %v", again, err)
	}
	page, _ := s.ListMessages(ctx, conversations.MessageQuery{Caller: who, ConversationID: c.ID, Limit: 10})
	if len(page.Messages) != 1 {
		t.Fatalf("%d messages, want 1", len(page.Messages))
	}
}

func testMessagePaging(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := caller("acc_1", "usr_1")
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
	var all []conversations.Message
	for i := range 23 {
		all = append(all, post(t, s, who, c.ID, fmt.Sprint(i)))
	}
	slices.Reverse(all) // posted in order, each later than the previous
	q := conversations.MessageQuery{Caller: who, ConversationID: c.ID, Limit: 5}
	var got []conversations.Message
	for range 100 {
		page, err := s.ListMessages(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if page.Messages == nil {
			t.Fatal("a page of messages is nil")
		}
		got = append(got, page.Messages...)
		if page.Next == nil {
			break
		}
		q.After = page.Next
	}
	if len(got) != len(all) {
		t.Fatalf("%d messages paged, want %d", len(got), len(all))
	}
	for i := range all {
		if got[i].ID != all[i].ID {
			t.Fatalf("message %d: %s, want %s", i, got[i].ID, all[i].ID)
		}
	}
}

func testMessageScope(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	a := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
	b := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
	m := post(t, s, caller("acc_1", "usr_1"), a.ID, "in a")
	if _, err := s.GetMessage(ctx, caller("acc_1", "usr_1"), b.ID, m.ID); !errors.Is(err, conversations.ErrNotFound) {
		t.Fatalf("message of a read through b: %v", err)
	}
	page, err := s.ListMessages(ctx, conversations.MessageQuery{Caller: caller("acc_1", "usr_1"), ConversationID: b.ID, Limit: 10})
	if err != nil || len(page.Messages) != 0 || page.Messages == nil {
		t.Fatalf("b lists %+v, %v", page, err)
	}
}

// testRepairByRead: a post that stopped after its first write (the
// message stored, the conversation not told) loses nothing: the message is
// listed, and the read records it in the conversation.
func testRepairByRead(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := caller("acc_1", "usr_1")
	for _, read := range []string{"list", "get"} {
		c := create(t, s, "acc_1", "", conversations.StatusSnoozed, "usr_1")
		m := conversations.Message{
			ID: conversations.NewMessageID(), AccountID: "acc_1", ConversationID: c.ID, Author: "usr_1", Body: "stopped",
			Metadata: []byte(`{}`), CreatedAt: c.UpdatedAt.Add(time.Second),
		}
		if err := s.Store.InsertMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		if stale := get(t, s, who, c.ID); stale.LastMessageAt != nil || stale.Version != c.Version {
			t.Fatalf("InsertMessage changed the conversation: %+v", stale)
		}
		switch read {
		case "list":
			page, err := s.ListMessages(ctx, conversations.MessageQuery{Caller: who, ConversationID: c.ID, Limit: 10})
			if err != nil || len(page.Messages) != 1 || page.Messages[0].ID != m.ID {
				t.Fatalf("list: %+v, %v", page, err)
			}
		case "get":
			if _, err := s.GetMessage(ctx, who, c.ID, m.ID); err != nil {
				t.Fatal(err)
			}
		}
		got := get(t, s, who, c.ID)
		if got.LastMessageAt == nil || !got.LastMessageAt.Equal(m.CreatedAt) || !got.UpdatedAt.Equal(m.CreatedAt) || got.Status != conversations.StatusOpen {
			t.Fatalf("after %s: %+v, message at %v", read, got, m.CreatedAt)
		}
		if _, err := s.ListMessages(ctx, conversations.MessageQuery{Caller: who, ConversationID: c.ID, Limit: 10}); err != nil {
			t.Fatal(err)
		}
		if again := get(t, s, who, c.ID); again.Version != got.Version {
			t.Fatalf("after %s: a second read changed it again", read)
		}
	}
}

func testRepairByPost(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := caller("acc_1", "usr_1")
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
	stopped := conversations.Message{ID: conversations.NewMessageID(), AccountID: "acc_1", ConversationID: c.ID, Author: "usr_1",
		Body: "stopped", Metadata: []byte(`{}`), CreatedAt: c.UpdatedAt}
	if err := s.Store.InsertMessage(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	next := post(t, s, who, c.ID, "next")
	got := get(t, s, who, c.ID)
	if got.LastMessageAt == nil || !got.LastMessageAt.Equal(next.CreatedAt) || next.CreatedAt.Before(stopped.CreatedAt) {
		t.Fatalf("after the next post: %+v", got)
	}
}

func testIdempotencyClaim(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	key := conversations.IdempotencyKey{AccountID: "acc_1", Caller: "usr_1", Key: "k1"}
	first, err := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: key, Fingerprint: "f1", ResourceID: "r1"})
	if err != nil || first.Fingerprint != "f1" || first.ResourceID != "r1" || first.Created != nil || first.CreatedAt.IsZero() {
		t.Fatalf("first claim: %+v, %v", first, err)
	}
	// A later claim gets the first record, whatever it brings.
	second, err := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: key, Fingerprint: "f2", ResourceID: "r2"})
	if err != nil || second.Fingerprint != "f1" || second.ResourceID != "r1" {
		t.Fatalf("second claim: %+v, %v", second, err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	msg := conversations.Message{
		ID: "r1", AccountID: "acc_1", ConversationID: "cnv_1", Author: "usr_1",
		Body: "first", Metadata: json.RawMessage(`{"n":1}`), CreatedAt: at,
	}
	if err := s.SaveIdempotentResult(ctx, key, conversations.Created{Message: &msg}); err != nil {
		t.Fatal(err)
	}
	// What the first request created stays.
	later := msg
	later.Body = "second"
	if err := s.SaveIdempotentResult(ctx, key, conversations.Created{Message: &later}); err != nil {
		t.Fatal(err)
	}
	third, err := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: key, Fingerprint: "f1", ResourceID: "r3"})
	if err != nil || third.Created == nil || third.Created.Conversation != nil || third.Created.Message == nil {
		t.Fatalf("claim after the result: %+v, %v", third, err)
	}
	if got := *third.Created.Message; got.ID != msg.ID || got.Body != "first" || got.ConversationID != msg.ConversationID ||
		got.Author != msg.Author || string(got.Metadata) != string(msg.Metadata) || !got.CreatedAt.Equal(at) {
		t.Fatalf("saved message %+v, want %+v", got, msg)
	}
	// A conversation is kept as created, its version with it.
	convKey := conversations.IdempotencyKey{AccountID: "acc_1", Caller: "usr_1", Key: "k-conv"}
	if _, err := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: convKey, Fingerprint: "fc", ResourceID: "cnv_1"}); err != nil {
		t.Fatal(err)
	}
	conv := conversations.Conversation{
		ID: "cnv_1", AccountID: "acc_1", Subject: "s", Status: conversations.StatusOpen,
		Participants: []string{"usr_1"}, CreatedAt: at, UpdatedAt: at, Version: 1,
	}
	if err := s.SaveIdempotentResult(ctx, convKey, conversations.Created{Conversation: &conv}); err != nil {
		t.Fatal(err)
	}
	rec, err := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: convKey, Fingerprint: "fc", ResourceID: "cnv_2"})
	if err != nil || rec.Created == nil || rec.Created.Conversation == nil || rec.Created.Message != nil {
		t.Fatalf("claim after the conversation: %+v, %v", rec, err)
	}
	if got := *rec.Created.Conversation; got.ID != conv.ID || got.Version != 1 || got.Subject != "s" || !got.UpdatedAt.Equal(at) ||
		len(got.Participants) != 1 || got.Status != conversations.StatusOpen {
		t.Fatalf("saved conversation %+v, want %+v", got, conv)
	}
	// Keys are per account and caller.
	for _, other := range []conversations.IdempotencyKey{
		{AccountID: "acc_2", Caller: "usr_1", Key: "k1"},
		{AccountID: "acc_1", Caller: "usr_2", Key: "k1"},
	} {
		rec, err := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: other, Fingerprint: "fx", ResourceID: "rx"})
		if err != nil || rec.Fingerprint != "fx" || rec.Created != nil {
			t.Fatalf("%+v: %+v, %v", other, rec, err)
		}
	}
}

func testIdempotencyRace(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	for round := range 5 {
		key := conversations.IdempotencyKey{AccountID: "acc_1", Caller: "usr_1", Key: fmt.Sprint("race-", round)}
		const n = 8
		got := make([]conversations.IdempotencyRecord, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				rec, err := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: key, Fingerprint: "f", ResourceID: fmt.Sprint("r", i)})
				if err != nil {
					t.Errorf("claim %d: %v", i, err)
				}
				got[i] = rec
			})
		}
		wg.Wait()
		for _, rec := range got {
			if rec.ResourceID != got[0].ResourceID || rec.ResourceID == "" {
				t.Fatalf("round %d: claims disagree: %+v", round, got)
			}
		}
	}
}

func testIdempotencyPurge(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	key := conversations.IdempotencyKey{AccountID: "acc_1", Caller: "usr_1", Key: "old"}
	rec, err := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: key, Fingerprint: "f", ResourceID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.PurgeIdempotencyKeys(ctx, rec.CreatedAt.Add(conversations.IdempotencyTTL-time.Minute)); err != nil || n != 0 {
		t.Fatalf("purge before the TTL: %d, %v", n, err)
	}
	if again, _ := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: key, Fingerprint: "f2", ResourceID: "r2"}); again.Fingerprint != "f" {
		t.Fatalf("the key was purged early: %+v", again)
	}
	if n, err := s.PurgeIdempotencyKeys(ctx, rec.CreatedAt.Add(conversations.IdempotencyTTL+time.Minute)); err != nil || n != 1 {
		t.Fatalf("purge after the TTL: %d, %v", n, err)
	}
	fresh, err := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: key, Fingerprint: "f2", ResourceID: "r2"})
	if err != nil || fresh.Fingerprint != "f2" || fresh.ResourceID != "r2" {
		t.Fatalf("claim after the purge: %+v, %v", fresh, err)
	}
}
