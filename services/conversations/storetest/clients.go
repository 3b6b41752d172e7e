package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/acme/platform/services/conversations"
)

// client is a service client of accountID.
func client(accountID, clientID string) conversations.Caller {
	return conversations.Caller{AccountID: accountID, ID: clientID, Client: true}
}

// listOrder sorts cs into the listing order.
func listOrder(cs []conversations.Conversation) {
	slices.SortFunc(cs, func(a, b conversations.Conversation) int {
		if inListOrder(a, b) {
			return -1
		}
		return 1
	})
}

// testClientListsItsAccount: a service client's listing is every
// conversation of its account, whoever takes part, in the listing order,
// each once across the pages; none of another account. Status and
// updatedAfter filter it as they filter a user's.
func testClientListsItsAccount(t *testing.T, s *conversations.Service) {
	var mine []conversations.Conversation
	statuses := []conversations.Status{conversations.StatusOpen, conversations.StatusClosed, conversations.StatusSnoozed}
	for i := range 23 {
		participant := fmt.Sprint("usr_", i%4)
		mine = append(mine, create(t, s, "acc_a", fmt.Sprint(i), statuses[i%3], participant))
		create(t, s, "acc_b", fmt.Sprint("other ", i), statuses[i%3], participant)
	}
	listOrder(mine)
	who := client("acc_a", "cli_1")
	pages := listAll(t, s, conversations.ListQuery{Caller: who, Limit: 5})
	if fmt.Sprint(pageSizes(pages)) != "[5 5 5 5 3]" {
		t.Fatalf("page sizes = %v, want [5 5 5 5 3]", pageSizes(pages))
	}
	if got := ids(slices.Concat(pages...)); !slices.Equal(got, ids(mine)) {
		t.Fatalf("pages = %v\nwant    %v", got, ids(mine))
	}
	mark := mine[len(mine)/2].UpdatedAt
	for _, status := range []conversations.Status{"", conversations.StatusClosed} {
		for _, after := range []bool{false, true} {
			q := conversations.ListQuery{Caller: who, Status: status, Limit: 2}
			if after {
				q.UpdatedAfter = &mark
			}
			var want []string
			for _, c := range mine {
				if (status == "" || c.Status == status) && (!after || c.UpdatedAt.After(mark)) {
					want = append(want, c.ID)
				}
			}
			if got := ids(slices.Concat(listAll(t, s, q)...)); !slices.Equal(got, want) {
				t.Errorf("status %q, updatedAfter %v: %v\nwant %v", status, after, got, want)
			}
		}
	}
	// A user of the account still sees only their own.
	got := ids(slices.Concat(listAll(t, s, conversations.ListQuery{Caller: caller("acc_a", "usr_1"), Limit: 100})...))
	if len(got) != 6 {
		t.Errorf("usr_1 sees %d conversations, want 6", len(got))
	}
}

// testClientCreates: a service client creates a conversation it takes no
// part in; it and the participants read it, another account does not, and
// a retry with the same id makes no second one.
func testClientCreates(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	who := client("acc_1", "cli_1")
	participant := "usr_000000000000000000000001" // the form NewConversation takes
	conv, err := conversations.NewConversation{Subject: "from a backend", Participants: []string{participant}}.Conversation(who)
	if err != nil {
		t.Fatal(err)
	}
	conv.ID = conversations.NewConversationID()
	c, err := s.CreateConversation(ctx, who, conv)
	if err != nil || !slices.Equal(c.Participants, []string{participant}) {
		t.Fatalf("create: %+v, %v", c, err)
	}
	for _, reader := range []conversations.Caller{who, client("acc_1", "cli_2"), caller("acc_1", participant)} {
		if got := get(t, s, reader, c.ID); got.Subject != "from a backend" {
			t.Errorf("%+v reads %+v", reader, got)
		}
	}
	for _, stranger := range []conversations.Caller{client("acc_2", "cli_1"), caller("acc_1", "cli_1"), caller("acc_1", "usr_2")} {
		if _, err := s.GetConversation(ctx, stranger, c.ID); !errors.Is(err, conversations.ErrNotFound) {
			t.Errorf("%+v: err = %v, want ErrNotFound", stranger, err)
		}
	}
	again, err := s.CreateConversation(ctx, who, conv)
	if err != nil || again.ID != c.ID || !again.CreatedAt.Equal(c.CreatedAt) {
		t.Fatalf("create again with the id: %+v, %v", again, err)
	}
	if n := len(slices.Concat(listAll(t, s, conversations.ListQuery{Caller: who, Limit: 10})...)); n != 1 {
		t.Fatalf("%d conversations, want 1", n)
	}
}

// testClientChangesItsAccount: a service client changes, posts to and
// reads the messages of a conversation of its account that it takes no
// part in; its messages are by its client id. Another account's service
// client finds none of it.
func testClientChangesItsAccount(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	c := create(t, s, "acc_1", "users only", conversations.StatusOpen, "usr_1")
	who := client("acc_1", "cli_1")
	patched, err := s.UpdateConversation(ctx, who, c.ID, conversations.Patch{Subject: ptr("renamed")}, conversations.Precondition{Given: true, Versions: []int64{c.Version}})
	if err != nil || patched.Subject != "renamed" {
		t.Fatalf("update: %+v, %v", patched, err)
	}
	added, err := s.AddParticipant(ctx, who, c.ID, "usr_2", conversations.Precondition{})
	if err != nil || !slices.Equal(added.Participants, []string{"usr_1", "usr_2"}) {
		t.Fatalf("add: %+v, %v", added, err)
	}
	removed, err := s.RemoveParticipant(ctx, who, c.ID, "usr_1", conversations.Precondition{})
	if err != nil || !slices.Equal(removed.Participants, []string{"usr_2"}) {
		t.Fatalf("remove: %+v, %v", removed, err)
	}
	m := post(t, s, who, c.ID, "from a backend")
	if m.Author != "cli_1" {
		t.Fatalf("author = %q, want the client id", m.Author)
	}
	if got := get(t, s, caller("acc_1", "usr_2"), c.ID); got.LastMessageAt == nil || !got.LastMessageAt.Equal(m.CreatedAt) {
		t.Fatalf("the post is not recorded: %+v", got)
	}
	page, err := s.ListMessages(ctx, conversations.MessageQuery{Caller: client("acc_1", "cli_2"), ConversationID: c.ID, Limit: 10})
	if err != nil || len(page.Messages) != 1 || page.Messages[0].ID != m.ID {
		t.Fatalf("list messages: %+v, %v", page, err)
	}
	if got, err := s.GetMessage(ctx, who, c.ID, m.ID); err != nil || got.Body != "from a backend" {
		t.Fatalf("get message: %+v, %v", got, err)
	}

	other := client("acc_2", "cli_1")
	for name, err := range map[string]error{
		"get":    errOf(s.GetConversation(ctx, other, c.ID)),
		"update": errOf(s.UpdateConversation(ctx, other, c.ID, conversations.Patch{Subject: ptr("x")}, conversations.Precondition{})),
		"add":    errOf(s.AddParticipant(ctx, other, c.ID, "usr_3", conversations.Precondition{})),
		"post":   errOf(s.PostMessage(ctx, other, conversations.Message{ConversationID: c.ID, Body: "x"})),
		"list":   errOf(s.ListMessages(ctx, conversations.MessageQuery{Caller: other, ConversationID: c.ID, Limit: 10})),
		"read":   errOf(s.GetMessage(ctx, other, c.ID, m.ID)),
	} {
		if !errors.Is(err, conversations.ErrNotFound) {
			t.Errorf("%s by another account's client: err = %v, want ErrNotFound", name, err)
		}
	}
	if got := get(t, s, who, c.ID); got.Subject != "renamed" || !slices.Equal(got.Participants, []string{"usr_2"}) {
		t.Fatalf("changed by another account: %+v", got)
	}
}

func errOf[T any](_ T, err error) error { return err }
