// Package storetest is the behaviour of the conversations service, the
// rules of conversations.Service over a real conversations.Store, written
// once as tests (after Dex's storage conformance suite) and run by every
// store implementation, never a mock:
//
//	func TestStore(t *testing.T) { storetest.Run(t, func(t *testing.T) conversations.Store { ... }) }
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/acme/platform/services/conversations"
)

// NewStore returns an empty store for one subtest.
type NewStore func(t *testing.T) conversations.Store

// Run runs the conformance suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s *conversations.Service)
	}{
		{"CreateAndGet", testCreateAndGet},
		{"GetIsScopedByAccountAndParticipant", testGetScope},
		{"EmptyListIsEmptyNotNil", testEmptyList},
		{"PagesCoverEverythingOnceInOrder", testPaging},
		{"ExactMultipleOfLimitHasNoEmptyLastPage", testExactPages},
		{"InsertsWhilePagingRepeatOrSkipNothing", testInsertsWhilePaging},
		{"StatusFilter", testStatusFilter},
		{"ListsAreScopedByAccountAndParticipant", testListIsolation},
		{"UpdatedAfter", testUpdatedAfter},
		{"CreateWithAGivenIDMakesOne", testCreateWithGivenID},
		{"UpdateConversation", testUpdateConversation},
		{"PreconditionOfOneVersionOneWriterWins", testPreconditionRace},
		{"ConcurrentChangesWithoutPreconditionAllApply", testConcurrentChanges},
		{"Participants", testParticipants},
		{"ChangesAreScopedByAccountAndParticipant", testChangeScope},
		{"PostMessage", testPostMessage},
		{"ConcurrentPostsNeverMoveBackwards", testConcurrentPosts},
		{"PostWithAGivenIDMakesOne", testPostWithGivenID},
		{"MessagePagesCoverEverythingOnceInOrder", testMessagePaging},
		{"MessagesAreScopedByConversationAccountAndParticipant", testMessageScope},
		{"InsertedMessageIsRecordedByTheNextRead", testRepairByRead},
		{"InsertedMessageIsRecordedByTheNextPost", testRepairByPost},
		{"IdempotencyClaim", testIdempotencyClaim},
		{"ConcurrentClaimsGetOneRecord", testIdempotencyRace},
		{"IdempotencyPurge", testIdempotencyPurge},
		{"ServiceClientListsEveryConversationOfItsAccount", testClientListsItsAccount},
		{"ServiceClientCreatesWithoutTakingPart", testClientCreates},
		{"ServiceClientChangesAndPostsAcrossItsAccount", testClientChangesItsAccount},
		{"EventsOfEveryChange", testEventsOfEveryChange},
		{"FailedChangesRecordNothing", testFailedChangesRecordNothing},
		{"EventsSurviveAStopAtEachStep", testEventsSurviveAStopAtEachStep},
		{"PendingStopsAtTheHorizon", testPendingStopsAtTheHorizon},
		{"ConcurrentRelaysKeepOneOrder", testConcurrentRelaysKeepOneOrder},
		{"EventVisibility", testEventVisibility},
		{"EventPurge", testEventPurge},
		{"PartitionLeases", testPartitionLeases},
		{"RelayMembers", testRelayMembers},
		{"PartitionsAreShared", testPartitionsAreShared},
		{"StalledHolderOrdersNothing", testStalledHolderOrdersNothing},
		{"SettledSharesReadLess", testSettledSharesReadLess},
		{"SharesChangeOnNotice", testSharesChangeOnNotice},
		{"SharesEvenOut", testSharesEvenOut},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, &conversations.Service{Store: newStore(t)}) })
	}
}

func create(t *testing.T, s *conversations.Service, accountID, subject string, status conversations.Status, participants ...string) conversations.Conversation {
	t.Helper()
	c, err := s.CreateConversation(context.Background(), conversations.Caller{AccountID: accountID, ID: participants[0]}, conversations.Conversation{
		AccountID: accountID, Subject: subject, Status: status, Participants: participants,
	})
	if err != nil {
		t.Fatalf("CreateConversation: %v", err)
	}
	return c
}

// listAll follows Next from the first page and returns every page.
func listAll(t *testing.T, s *conversations.Service, q conversations.ListQuery) [][]conversations.Conversation {
	t.Helper()
	var pages [][]conversations.Conversation
	for range 1000 {
		page, err := s.ListConversations(context.Background(), q)
		if err != nil {
			t.Fatalf("ListConversations: %v", err)
		}
		pages = append(pages, page.Conversations)
		if page.Next == nil {
			return pages
		}
		q.After = page.Next
	}
	t.Fatal("paging does not end")
	return nil
}

func ids(cs []conversations.Conversation) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// inListOrder reports whether a comes before b: updatedAt descending, then
// id descending.
func inListOrder(a, b conversations.Conversation) bool {
	if !a.UpdatedAt.Equal(b.UpdatedAt) {
		return a.UpdatedAt.After(b.UpdatedAt)
	}
	return a.ID > b.ID
}

func testCreateAndGet(t *testing.T, s *conversations.Service) {
	c := create(t, s, "acc_1", "Hello", conversations.StatusOpen, "usr_1", "usr_2")
	if c.ID == "" || c.CreatedAt.IsZero() || !c.CreatedAt.Equal(c.UpdatedAt) || c.LastMessageAt != nil {
		t.Fatalf("created = %+v", c)
	}
	for _, p := range []string{"usr_1", "usr_2"} {
		got, err := s.GetConversation(context.Background(), conversations.Caller{AccountID: "acc_1", ID: p}, c.ID)
		if err != nil || got.ID != c.ID || got.Subject != "Hello" || got.Status != conversations.StatusOpen ||
			!slices.Equal(got.Participants, []string{"usr_1", "usr_2"}) || !got.UpdatedAt.Equal(c.UpdatedAt) {
			t.Fatalf("Get as %s = %+v, %v", p, got, err)
		}
	}
}

func testGetScope(t *testing.T, s *conversations.Service) {
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
	for name, q := range map[string][3]string{
		"other account":     {"acc_2", "usr_1", c.ID},
		"not a participant": {"acc_1", "usr_9", c.ID},
		"unknown id":        {"acc_1", "usr_1", "cnv_nope"},
	} {
		if _, err := s.GetConversation(context.Background(), conversations.Caller{AccountID: q[0], ID: q[1]}, q[2]); !errors.Is(err, conversations.ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrNotFound", name, err)
		}
	}
}

func testEmptyList(t *testing.T, s *conversations.Service) {
	page, err := s.ListConversations(context.Background(), conversations.ListQuery{Caller: conversations.Caller{AccountID: "acc_1", ID: "usr_1"}, Limit: 10})
	if err != nil || page.Conversations == nil || len(page.Conversations) != 0 || page.Next != nil {
		t.Fatalf("empty list = %#v, %v", page, err)
	}
}

func testPaging(t *testing.T, s *conversations.Service) {
	var all []conversations.Conversation
	for i := range 25 {
		all = append(all, create(t, s, "acc_1", fmt.Sprint(i), conversations.StatusOpen, "usr_1"))
	}
	slices.SortFunc(all, func(a, b conversations.Conversation) int {
		if inListOrder(a, b) {
			return -1
		}
		return 1
	})
	pages := listAll(t, s, conversations.ListQuery{Caller: conversations.Caller{AccountID: "acc_1", ID: "usr_1"}, Limit: 10})
	if len(pages) != 3 || len(pages[0]) != 10 || len(pages[1]) != 10 || len(pages[2]) != 5 {
		t.Fatalf("page sizes = %d pages %v", len(pages), pageSizes(pages))
	}
	if got := ids(slices.Concat(pages...)); !slices.Equal(got, ids(all)) {
		t.Fatalf("pages = %v\nwant    %v", got, ids(all))
	}
}

func pageSizes(pages [][]conversations.Conversation) []int {
	var n []int
	for _, p := range pages {
		n = append(n, len(p))
	}
	return n
}

func testExactPages(t *testing.T, s *conversations.Service) {
	for range 4 {
		create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1")
	}
	pages := listAll(t, s, conversations.ListQuery{Caller: conversations.Caller{AccountID: "acc_1", ID: "usr_1"}, Limit: 2})
	if fmt.Sprint(pageSizes(pages)) != "[2 2]" {
		t.Fatalf("page sizes = %v, want [2 2]", pageSizes(pages))
	}
}

func testInsertsWhilePaging(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	existing := map[string]bool{}
	for range 12 {
		existing[create(t, s, "acc_1", "", conversations.StatusOpen, "usr_1").ID] = true
	}
	q := conversations.ListQuery{Caller: conversations.Caller{AccountID: "acc_1", ID: "usr_1"}, Limit: 5}
	seen := map[string]int{}
	for {
		page, err := s.ListConversations(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page.Conversations {
			seen[c.ID]++
		}
		// New activity between page requests.
		create(t, s, "acc_1", "new", conversations.StatusOpen, "usr_1")
		if page.Next == nil {
			break
		}
		q.After = page.Next
	}
	for id := range existing {
		if seen[id] != 1 {
			t.Errorf("%s seen %d times, want once", id, seen[id])
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("%s repeated %d times", id, n)
		}
	}
}

func testStatusFilter(t *testing.T, s *conversations.Service) {
	want := map[conversations.Status]int{conversations.StatusOpen: 3, conversations.StatusSnoozed: 2, conversations.StatusClosed: 4}
	for status, n := range want {
		for range n {
			create(t, s, "acc_1", "", status, "usr_1")
		}
	}
	for status, n := range want {
		pages := listAll(t, s, conversations.ListQuery{Caller: conversations.Caller{AccountID: "acc_1", ID: "usr_1"}, Status: status, Limit: 2})
		all := slices.Concat(pages...)
		if len(all) != n {
			t.Errorf("status %s: %d conversations, want %d", status, len(all), n)
		}
		for _, c := range all {
			if c.Status != status {
				t.Errorf("status %s filter returned %s", status, c.Status)
			}
		}
	}
}

func testListIsolation(t *testing.T, s *conversations.Service) {
	// Two accounts, two users each; user ids repeat across accounts on
	// purpose: the account scopes them.
	mine := map[[2]string][]string{}
	for _, acc := range []string{"acc_a", "acc_b"} {
		for i, p := range [][]string{{"u1"}, {"u2"}, {"u1", "u2"}} {
			c := create(t, s, acc, fmt.Sprint(acc, i), conversations.StatusOpen, p...)
			for _, u := range p {
				mine[[2]string{acc, u}] = append(mine[[2]string{acc, u}], c.ID)
			}
		}
	}
	for key, want := range mine {
		got := ids(slices.Concat(listAll(t, s, conversations.ListQuery{Caller: conversations.Caller{AccountID: key[0], ID: key[1]}, Limit: 100})...))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%v sees %v, want %v", key, got, want)
		}
	}
}
