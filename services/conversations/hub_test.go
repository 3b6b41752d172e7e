package conversations_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/mongostore"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// TestHubFansOutToConcurrentStreams drives the hub from every side at once,
// as a replica does (make test-race runs it under -race): events are
// appended to the log while streams read them, others open and close, and
// one never reads. Every reading stream gets every event it may see, once
// and in order; the one that never reads is dropped as slow; the bound per
// caller holds; Close ends every stream and refuses new ones.
func TestHubFansOutToConcurrentStreams(t *testing.T) {
	ctx := t.Context()
	store := mongostore.New(mongotest.New(t))
	if err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	const account, events = "acc_hub", 40
	hub := &conversations.Hub{Store: store, Interval: 20 * time.Millisecond, MaxPerCaller: 3}
	client := conversations.Caller{AccountID: account, ID: "cli_hub", Client: true}
	alice := conversations.Caller{AccountID: account, ID: "usr_alice"}

	subscribe := func(who conversations.Caller) *conversations.Subscription {
		t.Helper()
		sub, err := hub.Subscribe(who, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	slow := subscribe(client)
	readers := map[string]*conversations.Subscription{
		"client 1": subscribe(client), "client 2": subscribe(client), "alice": subscribe(alice),
	}
	if _, err := hub.Subscribe(client, nil, 0); !errors.Is(err, conversations.ErrTooManyStreams) {
		t.Fatalf("a fourth stream of one caller: %v, want ErrTooManyStreams", err)
	}

	// Each reader records the sequences it got; the writer appends the
	// next event once the first client stream has the last one, so that
	// every event is a batch of its own and the slow stream's buffer fills.
	var mu sync.Mutex
	got := map[string][]int64{}
	progress := make(chan int64, events)
	var reading sync.WaitGroup
	for name, sub := range readers {
		reading.Go(func() {
			for batch := range sub.Events {
				for _, e := range batch {
					mu.Lock()
					got[name] = append(got[name], e.Sequence)
					mu.Unlock()
					if name == "client 1" {
						progress <- e.Sequence
					}
				}
			}
			if !errors.Is(sub.Reason(), conversations.ErrShuttingDown) {
				t.Errorf("%s ended: %v, want ErrShuttingDown", name, sub.Reason())
			}
		})
	}
	// Meanwhile another caller's streams open and close.
	churnDone := make(chan struct{})
	var churning sync.WaitGroup
	churning.Go(func() {
		other := conversations.Caller{AccountID: account, ID: "usr_bob"}
		for {
			select {
			case <-churnDone:
				return
			default:
			}
			sub, err := hub.Subscribe(other, nil, 0)
			if err != nil {
				t.Errorf("bob's stream: %v", err)
				return
			}
			time.Sleep(time.Millisecond)
			hub.Unsubscribe(sub)
		}
	})

	start := time.Now().UTC().Truncate(time.Millisecond)
	for i := int64(1); i <= events; i++ {
		audience := []string{"usr_bob"}
		if i%2 == 0 {
			audience = []string{"usr_alice"}
		}
		e := conversations.Event{
			ID: conversations.NewEventID(), AccountID: account, Type: conversations.EventMessageCreated,
			Sequence: i, Timestamp: start.Add(time.Duration(i) * time.Millisecond), ConversationID: "cnv_hub", Audience: audience,
		}
		if err := store.AppendEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
		hub.Wake()
		select {
		case seq := <-progress:
			if seq != i {
				t.Fatalf("client 1 got %d after appending %d", seq, i)
			}
		case <-ctx.Done():
			t.Fatalf("client 1 never got event %d", i)
		}
	}
	close(churnDone)
	churning.Wait()

	// The slow stream had a buffer of 16 batches; it was dropped.
	drained := make(chan struct{})
	go func() {
		for range slow.Events {
		}
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(time.Minute):
		t.Fatal("the stream that never read was not dropped")
	}
	if !errors.Is(slow.Reason(), conversations.ErrSlowReader) {
		t.Errorf("the stream that never read ended: %v, want ErrSlowReader", slow.Reason())
	}

	// Every reader has what it may see by now: client 1 had the last event
	// before the writer stopped, and the hub hands a poll's events to all
	// streams at once. Wait for the others to take theirs.
	want := map[string][]int64{}
	for i := int64(1); i <= events; i++ {
		want["client 1"] = append(want["client 1"], i)
		want["client 2"] = append(want["client 2"], i)
		if i%2 == 0 {
			want["alice"] = append(want["alice"], i)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		done := len(got["client 2"]) == events && len(got["alice"]) == events/2
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
	}
	hub.Close()
	reading.Wait()
	for name, seqs := range want {
		if fmt.Sprint(got[name]) != fmt.Sprint(seqs) {
			t.Errorf("%s got %v, want %v", name, got[name], seqs)
		}
	}
	if _, err := hub.Subscribe(client, nil, 0); !errors.Is(err, conversations.ErrShuttingDown) {
		t.Errorf("a stream after Close: %v, want ErrShuttingDown", err)
	}
}

// TestHubStreamsMatchTheLog opens streams at random positions, for random
// callers and types, while events are appended, and closes some of them
// early: every stream gets exactly the events after its position that its
// caller may see, of its types, in order, with no gap and no repeat. The
// bounds are small, so streams catch up in many batches, go back to
// catching up when a poll brings more than they may hold, and are dropped
// as slow when they hold too much; a dropped stream reconnects from the
// last event it got, as a client does with Last-Event-ID.
func TestHubStreamsMatchTheLog(t *testing.T) {
	ctx := t.Context()
	store := mongostore.New(mongotest.New(t))
	if err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(uint64(seed), 0))
	const account, events, streams = "acc_random", 240, 24
	hub := &conversations.Hub{Store: store, Interval: 5 * time.Millisecond, MaxStreamBytes: 2 << 10, MaxBytes: 16 << 10}
	defer hub.Close()
	callers := []conversations.Caller{
		{AccountID: account, ID: "cli_random", Client: true},
		{AccountID: account, ID: "usr_ann"},
		{AccountID: account, ID: "usr_ben"},
	}
	typeSets := [][]conversations.EventType{nil, {conversations.EventMessageCreated}, {conversations.EventConversationUpdated, conversations.EventParticipantAdded}}

	// The log, as appended so far.
	var mu sync.Mutex
	var log []conversations.Event
	head := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return int64(len(log))
	}

	type stream struct {
		who   conversations.Caller
		types []conversations.EventType
		after int64
		stop  int // events it reads before it leaves; 0: to the end
		got   []int64
		done  chan struct{}
	}
	// read follows one stream, reconnecting when dropped, until it has
	// read s.stop events or the hub closes.
	read := func(s *stream) {
		defer close(s.done)
		pos := s.after
		for {
			sub, err := hub.Subscribe(s.who, s.types, pos)
			if err != nil {
				if !errors.Is(err, conversations.ErrShuttingDown) {
					t.Errorf("subscribe: %v", err)
				}
				return
			}
			for batch := range sub.Events {
				for _, e := range batch {
					mu.Lock()
					s.got = append(s.got, e.Sequence)
					mu.Unlock()
					pos = e.Sequence
				}
				hub.Sent(sub, batch)
				if s.stop > 0 && len(s.got) >= s.stop {
					hub.Unsubscribe(sub)
					return
				}
			}
			if !errors.Is(sub.Reason(), conversations.ErrSlowReader) {
				return // the hub closed
			}
		}
	}

	var all []*stream
	var readers sync.WaitGroup
	start := time.Now().UTC().Truncate(time.Millisecond)
	for i := int64(1); i <= events; i++ {
		e := conversations.Event{
			ID: conversations.NewEventID(), AccountID: account, Type: conversations.EventTypes[rnd.IntN(len(conversations.EventTypes))],
			Sequence: i, Timestamp: start.Add(time.Duration(i) * time.Millisecond), ConversationID: "cnv_random",
			Audience: []string{[]string{"usr_ann", "usr_ben"}[rnd.IntN(2)]},
		}
		if err := store.AppendEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		log = append(log, e)
		mu.Unlock()
		hub.Wake()
		if rnd.IntN(events/streams) == 0 || i == 1 {
			s := &stream{
				who: callers[rnd.IntN(len(callers))], types: typeSets[rnd.IntN(len(typeSets))],
				after: rnd.Int64N(head() + 1), done: make(chan struct{}),
			}
			if rnd.IntN(3) == 0 {
				s.stop = 1 + rnd.IntN(10)
			}
			all = append(all, s)
			readers.Go(func() { read(s) })
		}
		if rnd.IntN(4) == 0 {
			time.Sleep(time.Millisecond)
		}
	}

	want := func(s *stream) []int64 {
		var seqs []int64
		for _, e := range log {
			if e.Sequence > s.after && e.VisibleTo(s.who) && (len(s.types) == 0 || slices.Contains(s.types, e.Type)) {
				seqs = append(seqs, e.Sequence)
			}
		}
		return seqs
	}
	// Every stream gets to the end, or to the count it leaves at.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		behind := 0
		mu.Lock()
		for _, s := range all {
			n := len(want(s))
			if s.stop > 0 {
				n = min(n, s.stop)
			}
			if len(s.got) < n {
				behind++
			}
		}
		mu.Unlock()
		if behind == 0 {
			break
		}
	}
	hub.Close()
	readers.Wait()
	for i, s := range all {
		w := want(s)
		if s.stop > 0 {
			// It left after the batch that reached its count.
			if len(s.got) < min(s.stop, len(w)) {
				t.Errorf("stream %d left after %d events, before its %d", i, len(s.got), s.stop)
			}
			w = w[:min(len(s.got), len(w))]
		}
		if fmt.Sprint(s.got) != fmt.Sprint(w) {
			t.Errorf("stream %d (%s, types %v, after %d, stop %d):\n got %v\nwant %v", i, s.who.ID, s.types, s.after, s.stop, s.got, w)
		}
	}
	if len(all) < streams/2 {
		t.Errorf("only %d streams opened", len(all))
	}
}
