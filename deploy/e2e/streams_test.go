package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestResumedStreamSkipsNothing: while one stream of a replica follows the
// head of the log and changes keep coming, a stream opened on the same
// replica with Last-Event-ID k starts at k+1 and serves every event after
// k, as the feed lists them, with no gap and no duplicate (the stream in the OpenAPI document).
// Each round opens such streams one after another, each at another k,
// until the first stream has received the next change, so that some open
// while the replica reads the log for the first one.
func TestResumedStreamSkipsNothing(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// Each round opens up to maxPerRound streams besides stream A, and
	// closes them; the replica may notice the closes late.
	const rounds, maxPerRound = 8, 20
	s.convEnv = append(s.convEnv, fmt.Sprintf("CONVERSATIONS_EVENTS_MAX_STREAMS_PER_CALLER=%d", rounds*maxPerRound+1))
	s.startAccount(t)
	s.startConversations(t)
	alice := s.login(t, "alice").IDToken
	reader := s.clientToken(t, "conversations:read") // sees every event

	code, _, body := call(t, "POST", s.convURL+"/v1/conversations", alice, `{"subject":"resumed streams"}`)
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	var conv struct{ ID string }
	json.Unmarshal(body, &conv)
	messages := s.convURL + "/v1/conversations/" + conv.ID + "/messages"
	post := func(i int) error {
		req, _ := http.NewRequest("POST", messages, strings.NewReader(fmt.Sprintf(`{"body":"message %d"}`, i)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 201 {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("post: %d %s", resp.StatusCode, b)
		}
		return nil
	}
	// A backlog to resume into.
	const backlog = 60
	for i := range backlog {
		if err := post(i); err != nil {
			t.Fatal(err)
		}
	}
	var head int64
	waitFor(t, func() bool {
		head = feedHead(t, s.convURL, reader)
		return head > backlog // the conversation's event and every message's
	}, "the backlog's events in the feed")

	// Stream A follows the head; a writer keeps moving it, one change at
	// a time, so that each change is one read of the log for A.
	a := openSSE(t, s.convURL, reader, strconv.FormatInt(head, 10), -1)
	aFrom := head
	var (
		stopWriter = make(chan struct{})
		writerDone = make(chan struct{})
		writerErr  error
	)
	go func() {
		defer close(writerDone)
		for i := backlog; !isClosed(stopWriter); i++ {
			if writerErr = post(i); writerErr != nil {
				return
			}
		}
	}()
	stop := sync.OnceFunc(func() { close(stopWriter); <-writerDone })
	defer stop()
	// waitStreams waits for cond, failing at once when the writer or
	// stream A stopped.
	waitStreams := func(cond func() bool, what string) {
		t.Helper()
		waitFor(t, func() bool { return cond() || a.ended() || isClosed(writerDone) }, what)
		switch {
		case isClosed(writerDone):
			t.Fatalf("the writer stopped: %v", writerErr)
		case a.ended():
			t.Fatalf("stream A ended: %v", a.err)
		}
	}

	opened, skipped := 0, 0
	for round := range rounds {
		waitStreams(func() bool { return a.last() > head }, "stream A to receive the writer's change")
		head = a.last()
		// Resumed streams, one after another, until A has the next change.
		type resumed struct {
			k int64
			s *sseStream
		}
		var bs []resumed
		for len(bs) == 0 || (len(bs) < maxPerRound && a.last() == head) {
			k := head - 12 - int64(len(bs))
			bs = append(bs, resumed{k, openSSE(t, s.convURL, reader, "0", k)})
		}
		opened += len(bs)
		// What each must serve: the feed after its k, through the head
		// the feed shows now that all are open.
		through := feedHead(t, s.convURL, reader)
		feed := feedRange(t, s.convURL, reader, bs[len(bs)-1].k, through)
		for _, b := range bs {
			waitStreams(func() bool { return b.s.last() >= through || b.s.ended() },
				fmt.Sprintf("the stream with Last-Event-ID %d to reach %d", b.k, through))
		}
		for i, b := range bs {
			got := b.s.close()
			if last := b.s.last(); last < through {
				t.Fatalf("round %d: the stream with Last-Event-ID %d ended at %d, before %d: %v", round, b.k, last, through, b.s.err)
			}
			for len(got) > 0 && got[len(got)-1].Sequence > through {
				got = got[:len(got)-1]
			}
			want := slices.DeleteFunc(slices.Clone(feed), func(e feedEvent) bool { return e.Sequence <= b.k })
			if diff := compareEvents(got, want); diff != "" {
				skipped++
				t.Errorf("round %d: stream %d of %d, opened with Last-Event-ID %d while stream A was at %d: %s", round, i+1, len(bs), b.k, head, diff)
			}
		}
	}
	stop()
	if writerErr != nil {
		t.Fatal(writerErr)
	}
	events := a.close()
	for i, e := range events {
		if want := aFrom + 1 + int64(i); e.Sequence != want {
			t.Fatalf("stream A (after %d): sequence %d where %d was due", aFrom, e.Sequence, want)
		}
	}
	t.Logf("%d of %d resumed streams skipped or repeated events; stream A served %d events", skipped, opened, len(events))
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// compareEvents describes how a stream's events differ from the feed's
// (empty when they are the same).
func compareEvents(got, want []feedEvent) string {
	seqs := func(events []feedEvent) []int64 {
		out := make([]int64, len(events))
		for i, e := range events {
			out[i] = e.Sequence
		}
		return out
	}
	if len(want) == 0 {
		return "the feed has no event after the position"
	}
	if len(got) == 0 {
		return fmt.Sprintf("no event, want %d..%d", want[0].Sequence, want[len(want)-1].Sequence)
	}
	if got[0].Sequence != want[0].Sequence {
		return fmt.Sprintf("first event %d, want %d; got %v, want %v", got[0].Sequence, want[0].Sequence, seqs(got), seqs(want))
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d events, want %d; got %v, want %v", len(got), len(want), seqs(got), seqs(want))
	}
	for i := range got {
		if got[i].Sequence != want[i].Sequence || got[i].ID != want[i].ID {
			return fmt.Sprintf("event %d is %d (%s), want %d (%s)", i, got[i].Sequence, got[i].ID, want[i].Sequence, want[i].ID)
		}
	}
	return ""
}

// feedHead is the newest sequence of the feed.
func feedHead(t *testing.T, base, bearer string) int64 {
	t.Helper()
	var after int64
	for {
		page, next, err := readFeed(base, bearer, after)
		if err != nil {
			t.Fatal(err)
		}
		after = next
		if len(page) < 1000 {
			return after
		}
	}
}

// feedRange is the feed's events after after, through through.
func feedRange(t *testing.T, base, bearer string, after, through int64) []feedEvent {
	t.Helper()
	var out []feedEvent
	for after < through {
		page, next, err := readFeed(base, bearer, after)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			if e.Sequence <= through {
				out = append(out, e)
			}
		}
		if len(page) == 0 {
			t.Fatalf("the feed ends at %d, before %d", next, through)
		}
		after = next
	}
	return out
}

// sseStream is an open GET /v1/events/stream, read in the background.
type sseStream struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	events []feedEvent
	err    error // why reading ended
}

// openSSE opens the stream of bearer's events with ?after=after and, when
// lastEventID is not negative, Last-Event-ID, and reads it until it is
// closed.
func openSSE(t *testing.T, base, bearer, after string, lastEventID int64) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/events/stream?after="+after, nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	if lastEventID >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastEventID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	s := &sseStream{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e feedEvent
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
				return
			}
			s.mu.Lock()
			s.events = append(s.events, e)
			s.mu.Unlock()
		}
		s.mu.Lock()
		s.err = sc.Err()
		if s.err == nil {
			s.err = io.EOF
		}
		s.mu.Unlock()
	}()
	return s
}

// last is the sequence of the newest event received (0: none).
func (s *sseStream) last() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.events) == 0 {
		return 0
	}
	return s.events[len(s.events)-1].Sequence
}

// ended reports whether the stream ended.
func (s *sseStream) ended() bool { return isClosed(s.done) }

// close ends the stream and returns what it received.
func (s *sseStream) close() []feedEvent {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events
}
