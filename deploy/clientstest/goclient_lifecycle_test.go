package clientstest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	client "github.com/acme/platform/clients/go"
)

func ptr[T any](v T) *T { return &v }

func (g *goSuite) testPatchConversationSendsTheETagItRead(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()

	created, err := c.CreateConversation(ctx, client.NewConversation{Subject: "Renewal"})
	if err != nil {
		t.Fatal(err)
	}
	read, err := c.GetConversation(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if created.ETag == "" || read.ETag != created.ETag {
		t.Fatalf("ETags: created %q, read %q; want the same, not empty", created.ETag, read.ETag)
	}

	closed, err := c.PatchConversation(ctx, read, client.ConversationPatch{Status: client.StatusClosed})
	if err != nil {
		t.Fatal(err)
	}
	if closed.Status != client.StatusClosed || closed.Subject != "Renewal" || closed.ETag == "" || closed.ETag == read.ETag ||
		!closed.UpdatedAt.After(read.UpdatedAt) {
		t.Fatalf("patched = %+v, read %+v", closed, read)
	}
	reqs := f.recordedRequests(http.MethodPatch, "/v1/conversations/"+read.ID)
	if len(reqs) != 1 {
		t.Fatalf("%d PATCH requests", len(reqs))
	}
	if r := reqs[0]; r.Body != `{"status":"closed"}` || r.Header.Get("Content-Type") != "application/merge-patch+json" ||
		r.Header.Get("If-Match") != read.ETag {
		t.Fatalf("PATCH sent body %s, Content-Type %q, If-Match %q", r.Body, r.Header.Get("Content-Type"), r.Header.Get("If-Match"))
	}
	if again, err := c.GetConversation(ctx, created.ID); err != nil || again.ETag != closed.ETag {
		t.Fatalf("GET after PATCH: %+v, %v; want the ETag of the PATCH response", again, err)
	}

	// The value read before the change is stale: the service refuses it
	// and changes nothing.
	_, err = c.PatchConversation(ctx, read, client.ConversationPatch{Subject: ptr("Overwritten")})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusPreconditionFailed || e.Code != client.CodePreconditionFailed ||
		!errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("stale ETag: %v", err)
	}
	if now, _ := c.GetConversation(ctx, created.ID); now.Subject != "Renewal" || now.Status != client.StatusClosed {
		t.Fatalf("after a refused PATCH: %+v", now)
	}

	// A subject can be cleared; both members at once.
	cleared, err := c.PatchConversation(ctx, closed, client.ConversationPatch{Subject: ptr(""), Status: client.StatusSnoozed})
	if err != nil || cleared.Subject != "" || cleared.Status != client.StatusSnoozed {
		t.Fatalf("cleared = %+v, %v", cleared, err)
	}
	if reqs := f.recordedRequests(http.MethodPatch, "/v1/conversations/"+read.ID); reqs[len(reqs)-1].Body != `{"subject":"","status":"snoozed"}` {
		t.Fatalf("body = %s", reqs[len(reqs)-1].Body)
	}
}

func (g *goSuite) testPatchConversationNeedsAnETag(t *testing.T) {
	f := g.newWire(t)
	f.seed(1)
	c := f.client(t, nil)
	ctx := context.Background()
	page, err := c.ListConversationsPage(ctx, client.ListOptions{}, "")
	if err != nil || len(page.Conversations) != 1 {
		t.Fatalf("%+v, %v", page, err)
	}
	listed := page.Conversations[0]
	if listed.ETag != "" {
		t.Fatalf("a listed conversation has the ETag %q", listed.ETag)
	}
	if _, err := c.PatchConversation(ctx, listed, client.ConversationPatch{Status: client.StatusClosed}); err == nil ||
		!strings.Contains(err.Error(), "GetConversation") {
		t.Fatalf("PATCH without an ETag: %v", err)
	}
	if _, err := c.PatchConversation(ctx, client.Conversation{ID: listed.ID, ETag: "\"v1\"\r\nX-Evil: 1"}, client.ConversationPatch{}); err == nil {
		t.Fatal("an ETag with a line break was sent")
	}
	if n := len(f.recordedRequests(http.MethodPatch, "/")); n != 0 {
		t.Fatalf("%d PATCH requests sent", n)
	}
	// Got, it carries one, and the change goes through.
	got, err := c.GetConversation(ctx, listed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PatchConversation(ctx, got, client.ConversationPatch{Status: client.StatusClosed}); err != nil {
		t.Fatal(err)
	}
}

func (g *goSuite) testParticipants(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()
	alice, bob := f.userID, g.env["OTHER_USER_ID"]
	conv, err := c.CreateConversation(ctx, client.NewConversation{})
	if err != nil {
		t.Fatal(err)
	}
	participants := func() []string {
		t.Helper()
		got, err := c.GetConversation(ctx, conv.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Participants
	}

	carol := userID("carol")
	for range 2 { // idempotent
		for _, u := range []string{bob, carol} {
			if _, err := c.AddParticipant(ctx, conv.ID, u); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := participants(); !slices.Equal(got, []string{alice, bob, carol}) {
		t.Fatalf("participants = %q", got)
	}
	// An id with reserved characters is escaped into one path segment (the
	// service refuses it: user ids are "usr_" and 24 hex digits).
	odd := "usr/odd name?#%"
	f.set(func(f *wire) { f.invalidRequests = true })
	if _, err := c.AddParticipant(ctx, conv.ID, odd); !errors.Is(err, client.ErrValidationFailed) {
		t.Fatalf("an id of another form: %v", err)
	}
	f.set(func(f *wire) { f.invalidRequests = false })
	puts := f.recordedRequests(http.MethodPut, "/v1/conversations/"+conv.ID+"/participants/")
	if len(puts) != 5 || puts[4].Path != "/v1/conversations/"+conv.ID+"/participants/usr%2Fodd%20name%3F%23%25" {
		t.Fatalf("PUT requests = %+v", puts)
	}

	for range 2 {
		if _, err := c.RemoveParticipant(ctx, conv.ID, carol); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.RemoveParticipant(ctx, conv.ID, alice); err != nil { // leaving
		t.Fatal(err)
	}
	// Alice no longer sees it; Bob is the last participant.
	if _, err := c.GetConversation(ctx, conv.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after leaving: %v", err)
	}
	// Bob brings her back.
	if _, err := g.otherClient(t).AddParticipant(ctx, conv.ID, alice); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveParticipant(ctx, conv.ID, bob); err != nil {
		t.Fatal(err)
	}
	_, err = c.RemoveParticipant(ctx, conv.ID, alice)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusConflict || !errors.Is(err, client.ErrLastParticipant) {
		t.Fatalf("removing the last participant: %v", err)
	}

	// The 101st participant, to a conversation created with 100.
	others := []string{}
	for i := 1; i < 100; i++ {
		others = append(others, userID(fmt.Sprintf("user %03d", i)))
	}
	full, err := c.CreateConversation(ctx, client.NewConversation{Participants: others})
	if err != nil {
		t.Fatal(err)
	}
	conv = full
	if _, err := c.AddParticipant(ctx, conv.ID, userID("user 101")); !errors.Is(err, client.ErrTooManyParticipants) {
		t.Fatalf("the 101st participant: %v", err)
	}
	if _, err := c.AddParticipant(ctx, conv.ID, userID("user 001")); err != nil {
		t.Fatalf("adding one already there to a full conversation: %v", err)
	}

	for _, call := range []func() error{
		func() error { _, err := c.AddParticipant(ctx, conv.ID, ""); return err },
		func() error { _, err := c.RemoveParticipant(ctx, "", bob); return err },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "empty id") {
			t.Fatalf("empty id: %v", err)
		}
	}
}

func (g *goSuite) testParticipantChangesHonourIfMatch(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()
	conv, err := c.CreateConversation(ctx, client.NewConversation{})
	if err != nil {
		t.Fatal(err)
	}
	bobTag, err := c.AddParticipant(ctx, conv.ID, userID("bob"), client.WithIfMatch(conv.ETag))
	if err != nil {
		t.Fatal(err)
	}
	if bobTag == "" || bobTag == conv.ETag {
		t.Fatalf("AddParticipant returned the ETag %q (before: %q), want the new one", bobTag, conv.ETag)
	}
	// conv.ETag is stale now: the change of Bob moved it on.
	_, err = c.AddParticipant(ctx, conv.ID, userID("carol"), client.WithIfMatch(conv.ETag))
	if !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("stale If-Match: %v", err)
	}
	_, err = c.RemoveParticipant(ctx, conv.ID, userID("bob"), client.WithIfMatch(conv.ETag))
	if !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("stale If-Match: %v", err)
	}
	got, err := c.GetConversation(ctx, conv.ID)
	if err != nil || !slices.Equal(got.Participants, []string{f.userID, userID("bob")}) {
		t.Fatalf("after refused changes: %+v, %v", got, err)
	}
	if _, err := c.PatchConversation(ctx, conv, client.ConversationPatch{Subject: ptr("x")}); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("PATCH of a value read before a participant change: %v", err)
	}
	ifMatch := func(method string) []string {
		var out []string
		for _, r := range f.recordedRequests(method, "/v1/conversations/"+conv.ID+"/participants/") {
			out = append(out, r.Header.Get("If-Match"))
		}
		return out
	}
	if got := ifMatch(http.MethodPut); !slices.Equal(got, []string{conv.ETag, conv.ETag}) {
		t.Fatalf("If-Match of the PUTs = %q", got)
	}
	if got := ifMatch(http.MethodDelete); !slices.Equal(got, []string{conv.ETag}) {
		t.Fatalf("If-Match of the DELETE = %q", got)
	}
	if _, err := c.AddParticipant(ctx, conv.ID, userID("bob"), client.WithIfMatch("")); err == nil {
		t.Fatal("an empty If-Match was accepted")
	}

	// With the returned tag, the held value is current again.
	if got.ETag != bobTag {
		t.Fatalf("GET gives the ETag %q, AddParticipant returned %q", got.ETag, bobTag)
	}
	conv.ETag = bobTag
	if _, err := c.PatchConversation(ctx, conv, client.ConversationPatch{Subject: ptr("x")}); err != nil {
		t.Fatal(err)
	}
	// Idempotent calls that change nothing return the current tag.
	tag, err := c.RemoveParticipant(ctx, conv.ID, userID("nobody"))
	if err != nil {
		t.Fatal(err)
	}
	if now, _ := c.GetConversation(ctx, conv.ID); now.ETag != tag {
		t.Fatalf("ETag %q, GET says %q", tag, now.ETag)
	}
}

func (g *goSuite) testConversationsUpdatedAfter(t *testing.T) {
	f := g.newWire(t)
	seeded := f.seed(5) // c0 (oldest) .. c4
	c := f.client(t, nil)
	ctx := context.Background()
	// Between c1 and c2, in a zone of its own: the client sends it in UTC.
	since := seeded[2].UpdatedAt.Add(-(seeded[2].UpdatedAt.Sub(seeded[1].UpdatedAt)) / 2).In(time.FixedZone("CEST", 2*3600))
	if !since.After(seeded[1].UpdatedAt) {
		t.Fatalf("c1 and c2 were updated at the same time %s: the listing cannot tell them apart", since)
	}
	got := subjects(t, c.Conversations(ctx, client.ListOptions{Limit: 1, UpdatedAfter: since}))
	if want := []string{"c4", "c3", "c2"}; !slices.Equal(got, want) {
		t.Fatalf("subjects = %v, want %v", got, want)
	}
	uris := f.strings(func(f *wire) []string { return f.uris })
	if !strings.HasPrefix(uris[1], "/v1/conversations?") || !strings.Contains(uris[1], "updatedAfter="+url.QueryEscape(since.UTC().Format(time.RFC3339Nano))) {
		t.Fatalf("first request %s, want updatedAfter in UTC", uris[1])
	}
	page, err := c.ListConversationsPage(ctx, client.ListOptions{UpdatedAfter: since, Status: client.StatusOpen}, "")
	if err != nil || len(page.Conversations) != 3 {
		t.Fatalf("%+v, %v", page, err)
	}
}
