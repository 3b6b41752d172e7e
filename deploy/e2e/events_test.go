package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/deploy/internal/svcproc"
)

// TestEventsOrderedAcrossReplicas: three conversations processes on one
// database take changes at once; one is killed with SIGKILL mid-way. A
// consumer that polls GET /v1/events?after=<the last sequence it saw> on
// the first sees the event of every change visible through the REST API
// exactly once, in increasing sequence, and no event of a change that did
// not happen (docs/decisions.md, events). The events the killed process recorded but
// had not ordered are ordered by the relay that leases their partition
// (the killed one's, taken over after its lease).
func TestEventsOrderedAcrossReplicas(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// Each replica orders the others' events, which only the poll finds;
	// a killed holder's partitions are taken over after its lease.
	s.convEnv = append(s.convEnv, "CONVERSATIONS_EVENTS_POLL_INTERVAL=200ms", "CONVERSATIONS_RELAY_LEASE=2s")
	s.startAccount(t)
	replicas := s.startReplicas(t, 3)
	survivor, victim := replicas[0], replicas[2]
	alice := s.login(t, "alice").IDToken
	f := follow(t, survivor.url, alice)

	// Three writers, one per replica, 50 changes each; the third replica
	// is killed when its writer is half-way, and its writer goes on
	// through the first.
	const perWriter = 50
	convs := make([]string, len(replicas))
	for i, r := range replicas {
		convs[i] = createConversation(t, r.url, alice, fmt.Sprint("replica ", i))
	}
	var writers sync.WaitGroup
	var killOnce sync.Once
	for w := range replicas {
		writers.Go(func() {
			target := replicas[w].url
			for i := range perWriter {
				switch {
				case w == 2 && i == perWriter/2:
					// Killed while this writer's next requests are on
					// their way to it (and the others' change their data).
					go killOnce.Do(victim.proc.Kill)
				case w == 2 && i == perWriter/2+3:
					target = survivor.url
				}
				change(target, alice, convs[w], i, w)
			}
		})
	}
	writers.Wait()
	killOnce.Do(victim.proc.Kill)

	messages := storedMessages(t, survivor.url, alice, convs)
	if len(messages) < perWriter {
		t.Fatalf("only %d messages stored", len(messages))
	}
	// The consumer sees every one of them, in the end.
	f.waitForMessages(t, messages)
	seen := f.end()
	checkFeed(t, seen, messages)
	t.Logf("%d events, %d messages, sequences %d..%d", len(seen), len(messages), seen[0].Sequence, seen[len(seen)-1].Sequence)

	// SIGTERM ends an open stream with a retry: hint, and the process
	// exits cleanly without waiting for the stream.
	req, _ := http.NewRequest("GET", survivor.url+"/v1/events/stream", nil)
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
	survivor.proc.stop(t)
	rest, _ := io.ReadAll(resp.Body)
	if !strings.HasSuffix(string(rest), "retry: 2000\n\n") {
		t.Fatalf("the stream ended with %q", rest)
	}
}

// TestEventsResumeAfterRelayHolderKilled: three replicas share one relay
// partition, so one of them orders every event; it is killed with SIGKILL
// while writers post through all three. The feed loses nothing and repeats
// nothing, and resumes once another replica has taken the partition over
// (its lease, 2 s here, plus a renewal interval); the time is logged, not
// asserted, since a slow machine may stretch it.
func TestEventsResumeAfterRelayHolderKilled(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const lease = 2 * time.Second
	s.convEnv = append(s.convEnv, "CONVERSATIONS_EVENTS_POLL_INTERVAL=200ms",
		"CONVERSATIONS_RELAY_PARTITIONS=1", "CONVERSATIONS_RELAY_LEASE="+lease.String())
	s.startAccount(t)
	replicas := s.startReplicas(t, 3)
	holder := -1
	waitFor(t, func() bool {
		holder = -1
		for i, r := range replicas {
			switch metric(t, r.ops, "conversations_relay_partitions_held") {
			case 1:
				if holder >= 0 {
					return false
				}
				holder = i
			case 0:
			default:
				return false
			}
		}
		return holder >= 0
	}, "one replica to hold the partition")
	reader := replicas[(holder+1)%3]
	alice := s.login(t, "alice").IDToken
	f := follow(t, reader.url, alice)

	// Writers post through every replica until told to stop; the
	// holder's writer goes on through the reader once the holder is dead.
	// It posts back to back until then, so that the kill cuts a change in
	// flight; every other change waits writerPause, so that the store (on
	// the embedded one, one command at a time, each reading the whole
	// collection) keeps up and the test measures the takeover, not a
	// backlog.
	convs := make([]string, len(replicas))
	for i, r := range replicas {
		convs[i] = createConversation(t, r.url, alice, fmt.Sprint("replica ", i))
	}
	var (
		mu       sync.Mutex
		posted   = map[string]bool{} // message ids answered 2xx
		dead     = make(chan struct{})
		stop     = make(chan struct{})
		writers  sync.WaitGroup
		killedAt time.Time
	)
	for w := range replicas {
		writers.Go(func() {
			target, pause := replicas[w].url, writerPause
			if w == holder {
				pause = 0
			}
			for i := 0; ; i++ {
				select {
				case <-dead:
					target, pause = reader.url, writerPause
				default:
				}
				select {
				case <-stop:
					return
				case <-time.After(pause):
				}
				if id := change(target, alice, convs[w], i, w); id != "" {
					mu.Lock()
					posted[id] = true
					mu.Unlock()
				}
			}
		})
	}
	f.waitForCount(t, 30)
	killedAt = time.Now()
	replicas[holder].proc.Kill()
	close(dead)
	// Everything ordered before the kill is in the log now; what comes
	// after it was ordered by the replica that took the partition over.
	tail := f.tail(t)
	resumed := f.waitForAfter(t, tail)
	t.Logf("the feed resumed %v after the holder's SIGKILL (lease %v)", resumed.Sub(killedAt).Round(time.Millisecond), lease)
	f.waitForCount(t, f.count()+20) // and goes on
	close(stop)
	writers.Wait()

	messages := storedMessages(t, reader.url, alice, convs)
	mu.Lock()
	for id := range posted {
		if !messages[id] {
			t.Fatalf("message %s was answered 201 but is not stored", id)
		}
	}
	mu.Unlock()
	f.waitForMessages(t, messages)
	seen := f.end()
	checkFeed(t, seen, messages)
	t.Logf("%d events, %d messages (%d answered 201), sequences %d..%d", len(seen), len(messages), len(posted), seen[0].Sequence, seen[len(seen)-1].Sequence)
}

// writerPause is how long a writer of TestEventsResumeAfterRelayHolderKilled
// waits between changes that need not be in flight at the kill.
const writerPause = 50 * time.Millisecond

// replica is one conversations process of a stack.
type replica struct {
	url, ops string
	proc     *process
}

// startReplicas starts n conversations processes on the stack's
// database: the stack's own, then n-1 on addresses of their own.
func (s *stack) startReplicas(t *testing.T, n int) []replica {
	t.Helper()
	out := []replica{{url: s.convURL, ops: s.convOps, proc: s.startConversations(t)}}
	for len(out) < n {
		addr, ops := svcproc.FreeAddrForTest(t), svcproc.FreeAddrForTest(t)
		env := append(append([]string{}, s.convEnv...), "CONVERSATIONS_HTTP_ADDR="+addr, "CONVERSATIONS_OPS_ADDR="+ops)
		out = append(out, replica{url: "http://" + addr, ops: ops, proc: start(t, filepath.Join(s.bin, "conversations"), env, ops)})
	}
	return out
}

// metric reads an unlabelled metric of the process listening on ops.
func metric(t *testing.T, ops, name string) float64 {
	t.Helper()
	status, body := get(t, "http://"+ops+"/metrics")
	if status != 200 {
		t.Fatalf("GET /metrics of %s: %d", ops, status)
	}
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in the metrics of %s", name, ops)
	return 0
}

func createConversation(t *testing.T, base, bearer, subject string) string {
	t.Helper()
	code, _, body := call(t, "POST", base+"/v1/conversations", bearer, `{"subject":"`+subject+`"}`)
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	var c struct{ ID string }
	json.Unmarshal(body, &c)
	return c.ID
}

// change makes writer w's i-th change of conv through base: every tenth a
// PATCH of the subject, the others a message; it returns the id of a
// message answered 201 ("" otherwise). Errors are expected of a killed
// replica.
func change(base, bearer, conv string, i, w int) string {
	if i%10 == 9 {
		req, _ := http.NewRequest("PATCH", base+"/v1/conversations/"+conv, strings.NewReader(fmt.Sprintf(`{"subject":"change %d"}`, i)))
		req.Header.Set("Content-Type", "application/merge-patch+json")
		req.Header.Set("Authorization", "Bearer "+bearer)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		return ""
	}
	req, _ := http.NewRequest("POST", base+"/v1/conversations/"+conv+"/messages", strings.NewReader(fmt.Sprintf(`{"body":"%d-%d"}`, w, i)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var m struct{ ID string }
	if resp.StatusCode != 201 || json.NewDecoder(resp.Body).Decode(&m) != nil {
		return ""
	}
	return m.ID
}

// storedMessages is what the REST API shows happened: every message of
// convs (reading them also records a post that a kill cut between its two
// writes).
func storedMessages(t *testing.T, base, bearer string, convs []string) map[string]bool {
	t.Helper()
	messages := map[string]bool{}
	for _, c := range convs {
		next := base + "/v1/conversations/" + c + "/messages?limit=100"
		for next != "" {
			code, h, body := call(t, "GET", next, bearer, "")
			if code != 200 {
				t.Fatalf("messages: %d %s", code, body)
			}
			var list []struct{ ID string }
			json.Unmarshal(body, &list)
			for _, m := range list {
				messages[m.ID] = true
			}
			next = ""
			if link, _, ok := strings.Cut(strings.TrimPrefix(h.Get("Link"), "<"), ">"); ok && link != "" {
				next = base + link
			}
		}
	}
	return messages
}

// follower is a consumer of the feed: it asks for the events after the
// last sequence it saw, over and over, and notes when each arrived.
type follower struct {
	mu      sync.Mutex
	seen    []feedEvent
	arrived []time.Time
	stop    chan struct{}
	done    chan struct{}
}

func follow(t *testing.T, base, bearer string) *follower {
	f := &follower{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		var after int64
		for {
			page, next, err := readFeed(base, bearer, after)
			if err != nil {
				t.Errorf("feed: %v", err)
				return
			}
			now := time.Now()
			f.mu.Lock()
			f.seen = append(f.seen, page...)
			for range page {
				f.arrived = append(f.arrived, now)
			}
			f.mu.Unlock()
			after = next
			if len(page) == 0 {
				select {
				case <-f.stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-f.stop:
		default:
			close(f.stop)
		}
		<-f.done
	})
	return f
}

func (f *follower) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

func (f *follower) waitForCount(t *testing.T, n int) {
	t.Helper()
	waitFor(t, func() bool { return f.count() >= n }, fmt.Sprintf("%d events in the feed", n))
}

// tail is the highest sequence in the log now: the last seen once a read
// of the feed comes back empty.
func (f *follower) tail(t *testing.T) int64 {
	t.Helper()
	n := f.count()
	waitFor(t, func() bool {
		time.Sleep(100 * time.Millisecond) // more than a poll of the follower
		m := f.count()
		defer func() { n = m }()
		return m == n
	}, "the feed to stand still")
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		return 0
	}
	return f.seen[len(f.seen)-1].Sequence
}

// waitForAfter waits for an event after sequence seq and returns when it
// arrived.
func (f *follower) waitForAfter(t *testing.T, seq int64) time.Time {
	t.Helper()
	var at time.Time
	waitFor(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, e := range f.seen {
			if e.Sequence > seq {
				at = f.arrived[i]
				return true
			}
		}
		return false
	}, fmt.Sprintf("an event after sequence %d", seq))
	return at
}

func (f *follower) waitForMessages(t *testing.T, messages map[string]bool) {
	t.Helper()
	waitFor(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		for _, e := range f.seen {
			if e.Type == "message.created" && messages[e.Data.Message.ID] {
				n++
			}
		}
		return n >= len(messages)
	}, "the events of every stored message")
}

// end stops the follower and returns what it saw.
func (f *follower) end() []feedEvent {
	close(f.stop)
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

// checkFeed fails unless seen holds every event once, in increasing
// sequence, exactly one message.created for each stored message and none
// for another.
func checkFeed(t *testing.T, seen []feedEvent, messages map[string]bool) {
	t.Helper()
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
