package clientstest

import (
	"context"
	"slices"
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
		pos = page.Next
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
	for len(got) < n {
		for e, err := range c.Events(t.Context(), after, client.EventOptions{Limit: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, e)
			after = e.Sequence
		}
		if len(got) < n {
			time.Sleep(20 * time.Millisecond)
		}
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
