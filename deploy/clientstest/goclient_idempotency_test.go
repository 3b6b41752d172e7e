package clientstest

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	client "github.com/acme/platform/clients/go"
)

// keys returns the Idempotency-Key of each recorded request.
func keys(reqs []recorded) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Header.Get("Idempotency-Key"))
	}
	return out
}

func validKey(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func (g *goSuite) testCreateCallsSendAFreshIdempotencyKey(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()
	conv, err := c.CreateConversation(ctx, client.NewConversation{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateConversation(ctx, client.NewConversation{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.PostMessage(ctx, conv.ID, client.NewMessage{Body: "same body"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{"/v1/conversations", "/v1/conversations/" + conv.ID + "/messages"} {
		var reqs []recorded
		for _, r := range f.recordedRequests(http.MethodPost, path) {
			if r.Path == path {
				reqs = append(reqs, r)
			}
		}
		k := keys(reqs)
		if len(k) != 2 || !validKey(k[0]) || !validKey(k[1]) || k[0] == k[1] {
			t.Fatalf("POST %s: keys %q, want two different valid ones", path, k)
		}
	}
	// Two calls are two messages: the keys tell them apart.
	if got := bodies(t, c.Messages(ctx, conv.ID, client.MessageListOptions{})); len(got) != 2 {
		t.Fatalf("messages = %v", got)
	}
	if k := client.NewIdempotencyKey(); !validKey(k) || len(k) < 22 || k == client.NewIdempotencyKey() {
		t.Fatalf("NewIdempotencyKey = %q", k)
	}
}

func (g *goSuite) testTheCallersKeyMakesARepeatHarmless(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()

	key := client.NewIdempotencyKey()
	first, err := c.CreateConversation(ctx, client.NewConversation{Subject: "once"}, client.WithIdempotencyKey(key))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateConversation(ctx, client.NewConversation{Subject: "once"}, client.WithIdempotencyKey(key))
	if err != nil || again.ID != first.ID || again.ETag != first.ETag {
		t.Fatalf("repeat = %+v, %v; want the first response %+v", again, err, first)
	}
	if n := len(subjects(t, c.Conversations(ctx, client.ListOptions{}))); n != 1 {
		t.Fatalf("%d conversations, want 1", n)
	}

	msgKey := "order-4711/attempt"
	m1, err := c.PostMessage(ctx, first.ID, client.NewMessage{Body: "paid"}, client.WithIdempotencyKey(msgKey))
	if err != nil {
		t.Fatal(err)
	}
	m2, err := c.PostMessage(ctx, first.ID, client.NewMessage{Body: "paid"}, client.WithIdempotencyKey(msgKey))
	if err != nil || m2.ID != m1.ID || !m2.CreatedAt.Equal(m1.CreatedAt) {
		t.Fatalf("repeat = %+v, %v; want %+v", m2, err, m1)
	}
	if k := keys(f.recordedRequests(http.MethodPost, "/v1/conversations/"+first.ID+"/messages")); len(k) != 2 || k[0] != msgKey || k[1] != msgKey {
		t.Fatalf("keys sent = %q", k)
	}

	// The same key with another body is the service's 422.
	_, err = c.PostMessage(ctx, first.ID, client.NewMessage{Body: "refunded"}, client.WithIdempotencyKey(msgKey))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity || !errors.Is(err, client.ErrIdempotencyKeyReused) {
		t.Fatalf("key reused: %v", err)
	}
	if got := bodies(t, c.Messages(ctx, first.ID, client.MessageListOptions{})); len(got) != 1 {
		t.Fatalf("messages = %v, want one", got)
	}
}

func (g *goSuite) testInvalidIdempotencyKeysAreNotSent(t *testing.T) {
	f := g.newWire(t)
	id := f.seed(1)[0].ID
	c := f.client(t, nil)
	ctx := context.Background()
	for _, key := range []string{"", strings.Repeat("k", 256), "schlüssel", "tab\there", " padded", "line\n"} {
		if _, err := c.PostMessage(ctx, id, client.NewMessage{Body: "x"}, client.WithIdempotencyKey(key)); err == nil ||
			!strings.Contains(err.Error(), "Idempotency-Key") {
			t.Errorf("key %q: err = %v", key, err)
		}
		if _, err := c.CreateConversation(ctx, client.NewConversation{}, client.WithIdempotencyKey(key)); err == nil {
			t.Errorf("key %q accepted by CreateConversation", key)
		}
	}
	if _, err := c.PostMessage(ctx, id, client.NewMessage{Body: "x"}, client.WithIdempotencyKey(strings.Repeat("k", 255))); err != nil {
		t.Fatalf("a key of 255 characters: %v", err)
	}
	// An option a call does not take is refused, not ignored.
	if _, err := c.AddParticipant(ctx, id, f.g.env["OTHER_USER_ID"], client.WithIdempotencyKey("k")); err == nil {
		t.Fatal("AddParticipant took an Idempotency-Key")
	}
	if _, err := c.PostMessage(ctx, id, client.NewMessage{Body: "x"}, client.WithIfMatch(`"v1"`)); err == nil {
		t.Fatal("PostMessage took If-Match")
	}
	if n := len(f.recordedRequests(http.MethodPost, "/")) + len(f.recordedRequests(http.MethodPut, "/")); n != 1 {
		t.Fatalf("%d requests sent, want only the valid one", n)
	}
}

func (g *goSuite) testTheClientsOwnRetryReusesTheKey(t *testing.T) {
	t.Run("after a 401", func(t *testing.T) {
		f := g.newWire(t)
		id := f.seed(1)[0].ID
		c := f.client(t, nil)
		ctx := context.Background()
		if err := c.Login(ctx); err != nil {
			t.Fatal(err)
		}
		f.revokeAll()
		if _, err := c.PostMessage(ctx, id, client.NewMessage{Body: "hi"}); err != nil {
			t.Fatal(err)
		}
		k := keys(f.recordedRequests(http.MethodPost, "/v1/conversations/"+id+"/messages"))
		if len(k) != 2 || k[0] != k[1] || k[0] == "" {
			t.Fatalf("keys = %q, want the rejected request's key on the retry", k)
		}
	})

	// The response to a created message is lost: the server closes the
	// (kept-alive) connection instead of answering. The transport replays
	// the request, which the Idempotency-Key makes safe, and the service
	// answers the replay with the first response.
	//
	// The suites' fault proxy (FaultProxy) drops the answer, in front of
	// the wire, which records both requests.
	t.Run("after a lost response", func(t *testing.T) {
		f := g.newWire(t)
		id := f.seed(1)[0].ID
		lossy := f.faultProxy(t, f.conv.URL, faultSpec{Method: http.MethodPost, PathPrefix: "/v1/conversations/" + id + "/messages", Drop: 1})
		c, err := client.New(client.Config{AccountURL: f.account.URL, ConversationsURL: lossy.url, HTTPClient: &http.Client{}, // no timeout: see wire.newClient
			Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// A first request opens the connection the POST then reuses.
		if _, err := c.GetConversation(ctx, id); err != nil {
			t.Fatal(err)
		}
		m, err := c.PostMessage(ctx, id, client.NewMessage{Body: "exactly once"})
		if err != nil {
			t.Fatal(err)
		}
		reqs := f.recordedRequests(http.MethodPost, "/v1/conversations/"+id+"/messages")
		if k := keys(reqs); len(k) != 2 || k[0] != k[1] {
			t.Fatalf("keys = %q, want the lost request replayed with its key", k)
		}
		got := bodies(t, c.Messages(ctx, id, client.MessageListOptions{}))
		if len(got) != 1 || got[0] != "exactly once" {
			t.Fatalf("messages = %v, want one", got)
		}
		if stored, err := c.GetMessage(ctx, id, m.ID); err != nil || stored.ID != m.ID {
			t.Fatalf("the returned message is not the stored one: %+v, %v", stored, err)
		}
	})
}
