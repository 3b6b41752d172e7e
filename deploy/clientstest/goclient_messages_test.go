package clientstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	client "github.com/acme/platform/clients/go"
)

func (g *goSuite) testPostAndGetMessage(t *testing.T) {
	f := g.newWire(t)
	older := f.seed(2)[0] // c0, below c1 in the listing
	c := f.client(t, nil)
	ctx := context.Background()

	posted, err := c.PostMessage(ctx, older.ID, client.NewMessage{
		Body: "Hello, Bob", Metadata: map[string]any{"channel": "email", "n": 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if posted.ID == "" || posted.ConversationID != older.ID || posted.Author != f.userID || posted.Body != "Hello, Bob" ||
		string(posted.Metadata) != `{"channel":"email","n":1}` || posted.CreatedAt.IsZero() {
		t.Fatalf("posted = %+v (metadata %s)", posted, posted.Metadata)
	}
	reqs := f.recordedRequests(http.MethodPost, "/v1/conversations/"+older.ID+"/messages")
	if len(reqs) != 1 || reqs[0].Body != `{"body":"Hello, Bob","metadata":{"channel":"email","n":1}}` ||
		reqs[0].Header.Get("Content-Type") != "application/json" {
		t.Fatalf("requests = %+v", reqs)
	}

	got, err := c.GetMessage(ctx, older.ID, posted.ID)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(posted)
	if string(a) != string(b) {
		t.Fatalf("get = %s, want %s", a, b)
	}

	// Without metadata the member is left out, and the service's {} comes
	// back.
	plain, err := c.PostMessage(ctx, older.ID, client.NewMessage{Body: "Second"})
	if err != nil || string(plain.Metadata) != `{}` {
		t.Fatalf("plain = %+v (metadata %s), %v", plain, plain.Metadata, err)
	}
	if reqs := f.recordedRequests(http.MethodPost, "/v1/conversations/"+older.ID+"/messages"); reqs[1].Body != `{"body":"Second"}` {
		t.Fatalf("request body = %s", reqs[1].Body)
	}

	// The conversation rose to the top, with its lastMessageAt.
	page, err := c.ListConversationsPage(ctx, client.ListOptions{Limit: 1}, "")
	if err != nil || len(page.Conversations) != 1 || page.Conversations[0].ID != older.ID ||
		page.Conversations[0].LastMessageAt == nil || !page.Conversations[0].LastMessageAt.Equal(plain.CreatedAt) {
		t.Fatalf("first page = %+v, %v", page, err)
	}

	_, err = c.GetMessage(ctx, older.ID, missingMessage)
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "GET /v1/conversations/"+older.ID+"/messages/"+missingMessage+": 404") {
		t.Fatalf("missing message: %v", err)
	}
	for _, call := range []func() error{
		func() error { _, err := c.GetMessage(ctx, older.ID, ""); return err },
		func() error { _, err := c.GetMessage(ctx, "", posted.ID); return err },
		func() error { _, err := c.PostMessage(ctx, "", client.NewMessage{Body: "x"}); return err },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "empty id") {
			t.Fatalf("empty id: %v", err)
		}
	}
}

func (g *goSuite) testMessagesFollowsLinkAcrossPages(t *testing.T) {
	f := g.newWire(t)
	id := f.seed(1)[0].ID
	c := f.client(t, nil)
	ctx := context.Background()
	for i := range 5 {
		if _, err := c.PostMessage(ctx, id, client.NewMessage{Body: fmt.Sprintf("m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}

	got := bodies(t, c.Messages(ctx, id, client.MessageListOptions{Limit: 2}))
	if want := []string{"m4", "m3", "m2", "m1", "m0"}; !slices.Equal(got, want) {
		t.Fatalf("bodies = %v, want %v", got, want)
	}
	if n := f.count("GET /v1/conversations/" + id + "/messages"); n != 3 {
		t.Fatalf("%d page requests, want 3", n)
	}

	// One page at a time, with the next URL as an absolute URL.
	page, err := c.ListMessagesPage(ctx, id, client.MessageListOptions{Limit: 3}, "")
	if err != nil || len(page.Messages) != 3 || !strings.HasPrefix(page.NextURL, f.conv.URL+"/v1/conversations/"+id+"/messages?") {
		t.Fatalf("first page = %+v, %v", page, err)
	}
	page, err = c.ListMessagesPage(ctx, id, client.MessageListOptions{}, page.NextURL)
	if err != nil || len(page.Messages) != 2 || page.Messages[1].Body != "m0" || page.NextURL != "" {
		t.Fatalf("last page = %+v, %v", page, err)
	}

	// Leaving the loop requests no further page.
	before := f.count("GET /v1/conversations/" + id + "/messages")
	for _, err := range c.Messages(ctx, id, client.MessageListOptions{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if n := f.count("GET /v1/conversations/"+id+"/messages") - before; n != 1 {
		t.Fatalf("%d page requests after a break, want 1", n)
	}

	// A conversation without messages is an empty listing; an unknown one
	// a single not_found.
	empty := f.seed(1)[0].ID
	if got := bodies(t, c.Messages(ctx, empty, client.MessageListOptions{})); len(got) != 0 {
		t.Fatalf("messages of a new conversation: %v", got)
	}
	var errs []error
	for _, err := range c.Messages(ctx, missingConversation, client.MessageListOptions{}) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], client.ErrNotFound) {
		t.Fatalf("unknown conversation: %v", errs)
	}
}

func (g *goSuite) testPostMessageFollowsTheLifecycle(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()

	snoozed, err := c.CreateConversation(ctx, client.NewConversation{Status: client.StatusSnoozed})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PostMessage(ctx, snoozed.ID, client.NewMessage{Body: "wake up"}); err != nil {
		t.Fatal(err)
	}
	if conv, err := c.GetConversation(ctx, snoozed.ID); err != nil || conv.Status != client.StatusOpen {
		t.Fatalf("after a message: %+v, %v; want it reopened", conv, err)
	}

	closed, err := c.CreateConversation(ctx, client.NewConversation{Status: client.StatusClosed})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PostMessage(ctx, closed.ID, client.NewMessage{Body: "anyone?"})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusConflict || e.Code != client.CodeConversationClosed ||
		!errors.Is(err, client.ErrConversationClosed) {
		t.Fatalf("message to a closed conversation: %v", err)
	}
	// Reopened by a PATCH, it takes messages again.
	reopened, err := c.PatchConversation(ctx, closed, client.ConversationPatch{Status: client.StatusOpen})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PostMessage(ctx, reopened.ID, client.NewMessage{Body: "back"}); err != nil {
		t.Fatal(err)
	}
}
