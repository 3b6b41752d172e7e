package conversations_test

import (
	"errors"
	"fmt"
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
