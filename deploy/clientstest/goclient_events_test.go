package clientstest

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	client "github.com/acme/platform/clients/go"
)

var storyEvents = []string{client.EventConversationCreated, client.EventMessageCreated, client.EventConversationUpdated}

func eventTypes(events []client.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

// feedPosition reads the feed to its end and returns the position to
// continue from.
func feedPosition(t *testing.T, c *client.Client) int64 {
	t.Helper()
	pos := client.FromOldest
	for {
		page, err := c.ListEventsPage(t.Context(), pos, client.EventOptions{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		pos = page.Position
		if !page.Full {
			return pos
		}
	}
}

// feedAfter iterates the feed from after until it holds n events: the
// relay orders a change's event shortly after the change.
func feedAfter(t *testing.T, c *client.Client, after int64, n int) []client.Event {
	t.Helper()
	var got []client.Event
	// One feed ranged over again and again, as a reader polls it: each
	// range continues from its Position.
	feed := c.Events(after, client.EventOptions{Limit: 2})
	for len(got) < n {
		for e, err := range feed.All(t.Context()) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, e)
		}
		if len(got) < n {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if last := got[len(got)-1].Sequence; feed.Position() < last {
		t.Fatalf("the feed's position %d is before its last event %d", feed.Position(), last)
	}
	return got
}

// testEventsThroughFeedAndStream: create a conversation, post a message,
// close it: the three events in order through the feed (resuming from a
// stored sequence) and through the stream; then a dropped stream resumes
// from the last event it delivered, without a gap or a repeat.
func (g *goSuite) testEventsThroughFeedAndStream(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	// The stream goes straight to the service: the wire buffers whole
	// answers.
	direct := f.direct(t)
	ctx := t.Context()
	start := feedPosition(t, c)

	streamCtx, stopStream := context.WithCancel(ctx)
	streamed := make(chan client.Event)
	streamDone := make(chan error, 1)
	go func() {
		for e, err := range direct.FollowEvents(streamCtx, start, client.StreamOptions{}) {
			if err != nil {
				streamDone <- err
				return
			}
			select {
			case streamed <- e:
			case <-streamCtx.Done():
			}
		}
		streamDone <- nil
	}()

	conv, err := c.CreateConversation(ctx, client.NewConversation{Subject: "events"})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.PostMessage(ctx, conv.ID, client.NewMessage{Body: "hello"}, client.WithConversation(&conv))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PatchConversation(ctx, conv, client.ConversationPatch{Status: client.StatusClosed}); err != nil {
		t.Fatal(err)
	}

	feed := feedAfter(t, c, start, 3)
	if !slices.Equal(eventTypes(feed), storyEvents) {
		t.Fatalf("feed: %v, want %v", eventTypes(feed), storyEvents)
	}
	for i, e := range feed {
		if e.Data.Conversation.ID != conv.ID || e.Timestamp.IsZero() || (i > 0 && e.Sequence <= feed[i-1].Sequence) {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	if feed[1].Data.Message == nil || feed[1].Data.Message.ID != msg.ID ||
		feed[2].Data.Changes["status"] != client.StatusOpen || feed[2].Data.Conversation.Status != client.StatusClosed {
		t.Fatalf("data: message %+v, changes %v", feed[1].Data.Message, feed[2].Data.Changes)
	}
	// Resuming from a stored sequence gives the rest, once.
	if rest := feedAfter(t, c, feed[0].Sequence, 2); rest[0].ID != feed[1].ID || rest[1].ID != feed[2].ID {
		t.Fatalf("resumed feed: %v", eventTypes(rest))
	}

	var stream []client.Event
	for range 3 {
		stream = append(stream, <-streamed)
	}
	for i := range stream {
		if stream[i].ID != feed[i].ID || stream[i].Sequence != feed[i].Sequence {
			t.Fatalf("stream %v, feed %v", eventTypes(stream), eventTypes(feed))
		}
	}
	stopStream() // dropped
	if err := <-streamDone; err != nil && err != context.Canceled {
		t.Fatalf("stream ended with %v", err)
	}

	// Resumed from the second event delivered: the third again, then a
	// change made while no stream was open, then one made after.
	if _, err := c.PatchConversation(ctx, conv, client.ConversationPatch{Status: client.StatusOpen}); err == nil {
		t.Fatal("a patch with the ETag before the close succeeded") // conv is stale
	}
	fresh, err := c.GetConversation(ctx, conv.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PatchConversation(ctx, fresh, client.ConversationPatch{Subject: ptr("reopened later")}); err != nil {
		t.Fatal(err)
	}
	var resumed []client.Event
	for e, err := range direct.FollowEvents(ctx, stream[1].Sequence, client.StreamOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		resumed = append(resumed, e)
		if len(resumed) == 2 {
			break
		}
	}
	if resumed[0].ID != stream[2].ID || resumed[1].Type != client.EventConversationUpdated ||
		resumed[1].Data.Changes["subject"] != "events" || resumed[1].Sequence <= stream[2].Sequence {
		t.Fatalf("resumed stream: %v (%+v)", eventTypes(resumed), resumed[1].Data.Changes)
	}
}

// testFollowEventsRenewsARefusedToken: a reconnection whose token the
// service refuses (401 invalid_token, as it answers a token that expired)
// renews the session once and resumes where the stream ended; a token
// refused again right after its renewal ends the stream with
// ErrInvalidToken instead of a reconnection loop. The suites' fault proxy
// breaks the tokens in front of the service (the wire would buffer the
// stream) and cuts the first stream after its first event.
func (g *goSuite) testFollowEventsRenewsARefusedToken(t *testing.T) {
	f := g.newWire(t)
	direct := f.direct(t)
	ctx := t.Context()
	start := feedPosition(t, direct)
	conv, err := direct.CreateConversation(ctx, client.NewConversation{Subject: "a refused token"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.PostMessage(ctx, conv.ID, client.NewMessage{Body: "after the refusal"}); err != nil {
		t.Fatal(err)
	}
	// The client renews through the wire, which counts the renewals.
	streamClient := func(p *dropProxy) *client.Client {
		c, err := client.New(client.Config{AccountURL: f.account.URL, ConversationsURL: p.url, HTTPClient: &http.Client{}, // no timeout: see wire.newClient
			Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	streams := faultSpec{Method: http.MethodGet, PathPrefix: "/v1/events/stream", CutAfterEvents: 1}

	spec := streams
	spec.Drop, spec.RefuseFrom, spec.RefuseTokens = 1, 1, 1
	p := f.faultProxy(t, g.st.convURL, spec)
	c := streamClient(p)
	var got []client.Event
	for e, err := range c.FollowEvents(ctx, start, client.StreamOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
		if len(got) == 2 {
			break
		}
	}
	if !slices.Equal(eventTypes(got), storyEvents[:2]) || got[0].Data.Conversation.ID != conv.ID {
		t.Fatalf("stream: %v", eventTypes(got))
	}
	reqs := p.requests()
	if len(reqs) != 3 || reqs[0].TokenRefused || !reqs[1].TokenRefused || reqs[2].TokenRefused {
		t.Fatalf("stream requests %+v, want the first, its refused reconnection, and the retry", reqs)
	}
	auth := func(i int) string { return reqs[i].Headers["Authorization"] }
	if auth(1) != auth(0) || auth(2) == auth(1) {
		t.Fatal("want the refused token renewed, and only then")
	}
	resumed := strconv.FormatInt(got[0].Sequence, 10)
	if reqs[1].Headers["Last-Event-Id"] != resumed || reqs[2].Headers["Last-Event-Id"] != resumed {
		t.Fatalf("Last-Event-ID %q and %q, want %s", reqs[1].Headers["Last-Event-Id"], reqs[2].Headers["Last-Event-Id"], resumed)
	}
	if logins, refreshes := f.renewals(); logins != 1 || refreshes != 1 {
		t.Fatalf("%d logins, %d refreshes, want 1 and 1", logins, refreshes)
	}

	// Refused twice in a row: the error, once, and no third request.
	spec = streams
	spec.RefuseTokens = 2
	p = f.faultProxy(t, g.st.convURL, spec)
	var errs []error
	for e, err := range streamClient(p).FollowEvents(ctx, start, client.StreamOptions{}) {
		if err == nil {
			t.Fatalf("an event through refused tokens: %+v", e)
		}
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], client.ErrInvalidToken) {
		t.Fatalf("errors %v, want ErrInvalidToken once", errs)
	}
	if reqs := p.requests(); len(reqs) != 2 || !reqs[0].TokenRefused || !reqs[1].TokenRefused ||
		reqs[0].Headers["Authorization"] == reqs[1].Headers["Authorization"] {
		t.Fatalf("stream requests %+v, want two, the second with a renewed token", reqs)
	}
}
