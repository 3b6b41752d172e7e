package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/deploy/internal/svcproc"
)

// TestEventsOrderedAcrossReplicas: two conversations processes on one
// database take changes at once; one is killed with SIGKILL mid-way. A
// consumer that polls GET /v1/events?after=<the last sequence it saw> on
// the survivor sees the event of every change visible through the REST
// API exactly once, in increasing sequence, and no event of a change that
// did not happen (contract 11.1). The events the killed process recorded
// but had not ordered are ordered by the survivor's relay.
func TestEventsOrderedAcrossReplicas(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// Each replica orders the other's events, which only the poll finds.
	s.convEnv = append(s.convEnv, "CONVERSATIONS_EVENTS_POLL_INTERVAL=200ms")
	s.startAccount(t)
	survivor := s.startConversations(t)
	victimAddr, victimOps := svcproc.FreeAddrForTest(t), svcproc.FreeAddrForTest(t)
	victimEnv := append(append([]string{}, s.convEnv...),
		"CONVERSATIONS_HTTP_ADDR="+victimAddr, "CONVERSATIONS_OPS_ADDR="+victimOps)
	victim := start(t, filepath.Join(s.bin, "conversations"), victimEnv, victimOps)
	replicas := []string{s.convURL, "http://" + victimAddr}
	alice := s.login(t, "alice").IDToken

	// A consumer follows the feed on the survivor from the start.
	var (
		mu       sync.Mutex
		seen     []feedEvent
		stopFeed = make(chan struct{})
		feedDone = make(chan struct{})
	)
	go func() {
		defer close(feedDone)
		var after int64
		for {
			page, next, err := readFeed(s.convURL, alice, after)
			if err != nil {
				t.Errorf("feed: %v", err)
				return
			}
			mu.Lock()
			seen = append(seen, page...)
			mu.Unlock()
			after = next
			if len(page) == 0 {
				select {
				case <-stopFeed:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}()

	// Two writers, one per replica, 50 changes each; the second replica
	// is killed when its writer is half-way, and its writer goes on
	// through the survivor.
	const perWriter = 50
	var convs [2]string
	for i := range convs {
		code, _, body := call(t, "POST", replicas[i]+"/v1/conversations", alice, `{"subject":"replica `+fmt.Sprint(i)+`"}`)
		if code != 201 {
			t.Fatalf("create: %d %s", code, body)
		}
		var c struct{ ID string }
		json.Unmarshal(body, &c)
		convs[i] = c.ID
	}
	var writers sync.WaitGroup
	var killOnce sync.Once
	for w := range 2 {
		writers.Go(func() {
			target := replicas[w]
			for i := range perWriter {
				switch {
				case w == 1 && i == perWriter/2:
					// Killed while this writer's next requests are on
					// their way to it (and the other's change its data).
					go killOnce.Do(victim.Kill)
				case w == 1 && i == perWriter/2+3:
					target = replicas[0]
				}
				path := fmt.Sprintf("/v1/conversations/%s/messages", convs[w])
				if i%10 == 9 {
					// Some changes that are not messages.
					patch := fmt.Sprintf(`{"subject":"change %d"}`, i)
					req, _ := http.NewRequest("PATCH", target+"/v1/conversations/"+convs[w], strings.NewReader(patch))
					req.Header.Set("Content-Type", "application/merge-patch+json")
					req.Header.Set("Authorization", "Bearer "+alice)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
					continue
				}
				req, _ := http.NewRequest("POST", target+path, strings.NewReader(fmt.Sprintf(`{"body":"%d-%d"}`, w, i)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+alice)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	writers.Wait()
	killOnce.Do(victim.Kill)

	// What the REST API shows happened: every message of both
	// conversations (reading them also records a post that the kill cut
	// between its two writes), and the conversations' subjects.
	messages := map[string]bool{}
	for _, c := range convs {
		code, _, body := call(t, "GET", s.convURL+"/v1/conversations/"+c+"/messages?limit=100", alice, "")
		if code != 200 {
			t.Fatalf("messages: %d %s", code, body)
		}
		var list []struct{ ID string }
		json.Unmarshal(body, &list)
		for _, m := range list {
			messages[m.ID] = true
		}
	}
	if len(messages) < perWriter {
		t.Fatalf("only %d messages stored", len(messages))
	}
	// The consumer sees every one of them, in the end.
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, e := range seen {
			if e.Type == "message.created" && messages[e.Data.Message.ID] {
				n++
			}
		}
		return n >= len(messages)
	}, "the events of every stored message")
	close(stopFeed)
	<-feedDone

	mu.Lock()
	defer mu.Unlock()
	ids := map[string]bool{}
	created := map[string]int{}
	for i, e := range seen {
		if ids[e.ID] {
			t.Fatalf("event %s (sequence %d) served twice", e.ID, e.Sequence)
		}
		ids[e.ID] = true
		if i > 0 && e.Sequence <= seen[i-1].Sequence {
			t.Fatalf("sequence %d after %d", e.Sequence, seen[i-1].Sequence)
		}
		switch e.Type {
		case "message.created":
			if !messages[e.Data.Message.ID] {
				t.Fatalf("an event of message %s, which is not stored", e.Data.Message.ID)
			}
			created[e.Data.Message.ID]++
		case "conversation.created", "conversation.updated":
		default:
			t.Fatalf("unexpected event %s", e.Type)
		}
	}
	for id := range messages {
		if created[id] != 1 {
			t.Fatalf("message %s has %d events", id, created[id])
		}
	}
	t.Logf("%d events, %d messages, sequences %d..%d", len(seen), len(messages), seen[0].Sequence, seen[len(seen)-1].Sequence)

	// SIGTERM ends an open stream with a retry: hint, and the process
	// exits cleanly without waiting for the stream.
	req, _ := http.NewRequest("GET", s.convURL+"/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := resp.Body.Read(first); err != nil { // the stream is open
		t.Fatal(err)
	}
	survivor.stop(t)
	rest, _ := io.ReadAll(resp.Body)
	if !strings.HasSuffix(string(rest), "retry: 2000\n\n") {
		t.Fatalf("the stream ended with %q", rest)
	}
}

type feedEvent struct {
	ID       string
	Type     string
	Sequence int64
	Data     struct {
		Message struct{ ID string }
	}
}

// readFeed reads one page of the feed after after and returns it with the
// position its Link names.
func readFeed(base, bearer string, after int64) ([]feedEvent, int64, error) {
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/events?after=%d&limit=1000", base, after), nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return nil, 0, fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	var page []feedEvent
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, 0, err
	}
	var next int64
	if _, err := fmt.Sscanf(resp.Header.Get("Link"), "</v1/events?after=%d", &next); err != nil {
		return nil, 0, fmt.Errorf("Link %q: %v", resp.Header.Get("Link"), err)
	}
	return page, next, nil
}
