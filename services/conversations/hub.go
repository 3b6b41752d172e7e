package conversations

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Hub fans the account logs out to the live streams of one replica
// (contract 11.2). Whatever the number of streams, it reads the log once
// per interval for each account that has streams open, and hands each
// stream the events after its position that it may see. A stream that has
// not taken what it was handed when the next events come is dropped, so a
// slow reader is never buffered without bound; it reconnects with
// Last-Event-ID and loses nothing.
//
// The Hub polls only while a stream is open. Close ends every stream (at
// SIGTERM) and refuses new ones.
type Hub struct {
	Store EventStore
	// Interval is the time between two reads of the log (the latency of
	// an event from another replica); Wake reads at once.
	Interval time.Duration
	// MaxPerCaller bounds the streams of one caller on this replica.
	MaxPerCaller int
	Logger       *slog.Logger
	// Opened and Dropped, when set, count streams opened and closed (a
	// stream dropped for slowness: slow).
	Opened  func()
	Dropped func(slow bool)
	// Read, when set, counts the hub's reads of the log: what its streams
	// cost the database.
	Read func()

	mu      sync.Mutex
	subs    map[string][]*Subscription // by account
	callers map[string]int             // streams by caller
	running bool
	closed  bool
	stop    chan struct{}
	// wake is made once, by wakeChan: Wake may be called before any
	// stream opens, from any goroutine.
	wakeOnce sync.Once
	wake     chan struct{}
}

func (h *Hub) wakeChan() chan struct{} {
	h.wakeOnce.Do(func() { h.wake = make(chan struct{}, 1) })
	return h.wake
}

// ErrTooManyStreams: the caller has MaxPerCaller streams open already.
var ErrTooManyStreams = errors.New("too many open streams")

// ErrShuttingDown: the replica is stopping; the client reconnects to
// another.
var ErrShuttingDown = errors.New("shutting down")

// streamBuffer is how many batches a stream may have waiting; a stream
// that has more is slow.
const streamBuffer = 16

// hubBatch is the most events one read of an account's log returns.
const hubBatch = 1000

// Subscription is one open stream: Events delivers batches of the events
// its caller may see, in increasing sequence; it is closed when the
// stream must end (Reason says why).
type Subscription struct {
	Events <-chan []Event
	events chan []Event
	caller Caller
	types  []EventType
	pos    int64 // the highest sequence examined for it (hub's lock)
	reason error
	ended  bool
}

// Reason is why Events was closed: ErrSlowReader or ErrShuttingDown.
func (s *Subscription) Reason() error { return s.reason }

// ErrSlowReader: the stream did not take its events in time.
var ErrSlowReader = errors.New("slow reader dropped")

// Subscribe opens a stream of who's events of types (empty: all) after
// position after.
func (h *Hub) Subscribe(who Caller, types []EventType, after int64) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrShuttingDown
	}
	key := who.AccountID + "\x00" + who.KeyOwner()
	if h.MaxPerCaller > 0 && h.callers[key] >= h.MaxPerCaller {
		return nil, ErrTooManyStreams
	}
	if h.subs == nil {
		h.subs, h.callers = map[string][]*Subscription{}, map[string]int{}
	}
	ch := make(chan []Event, streamBuffer)
	sub := &Subscription{Events: ch, events: ch, caller: who, types: types, pos: after}
	h.subs[who.AccountID] = append(h.subs[who.AccountID], sub)
	h.callers[key]++
	if !h.running {
		h.running = true
		h.stop = make(chan struct{})
		go h.run(h.stop)
	}
	if h.Opened != nil {
		h.Opened()
	}
	h.Wake()
	return sub, nil
}

// Unsubscribe closes sub (the stream ended); the hub stops polling when
// no stream is left.
func (h *Hub) Unsubscribe(sub *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.remove(sub, nil)
}

// remove takes sub out (h.mu held), closing its channel with reason.
func (h *Hub) remove(sub *Subscription, reason error) {
	if sub.ended {
		return
	}
	sub.ended, sub.reason = true, reason
	close(sub.events)
	account := sub.caller.AccountID
	h.subs[account] = slices.DeleteFunc(h.subs[account], func(s *Subscription) bool { return s == sub })
	if len(h.subs[account]) == 0 {
		delete(h.subs, account)
	}
	key := account + "\x00" + sub.caller.KeyOwner()
	if h.callers[key]--; h.callers[key] <= 0 {
		delete(h.callers, key)
	}
	if h.Dropped != nil {
		h.Dropped(errors.Is(reason, ErrSlowReader))
	}
	if len(h.subs) == 0 && h.running {
		h.running = false
		close(h.stop)
	}
}

// Wake makes the hub read the logs now (events were just copied).
func (h *Hub) Wake() {
	select {
	case h.wakeChan() <- struct{}{}:
	default:
	}
}

// Close ends every stream with ErrShuttingDown and refuses new ones.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, subs := range h.subs {
		for _, sub := range slices.Clone(subs) {
			h.remove(sub, ErrShuttingDown)
		}
	}
}

func (h *Hub) run(stop <-chan struct{}) {
	interval := h.Interval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	for {
		select {
		case <-stop:
			return
		case <-ticker.C:
		case <-h.wakeChan():
		}
		h.Poll(ctx)
	}
}

// Poll reads each account's log once, from the lowest position of its
// streams, and hands the events out. The hub calls it every Interval and
// on Wake.
func (h *Hub) Poll(ctx context.Context) {
	h.mu.Lock()
	from := make(map[string]int64, len(h.subs))
	for account, subs := range h.subs {
		low := subs[0].pos
		for _, s := range subs[1:] {
			low = min(low, s.pos)
		}
		from[account] = low
	}
	h.mu.Unlock()
	for account, after := range from {
		if h.Read != nil {
			h.Read()
		}
		events, err := h.Store.ListEvents(ctx, EventRange{AccountID: account, After: after, Limit: hubBatch})
		if err != nil {
			if ctx.Err() == nil && h.Logger != nil {
				h.Logger.Warn("read events for streams", "account_id", account, "error", err.Error())
			}
			continue
		}
		if len(events) == 0 {
			continue
		}
		h.deliver(account, events)
		if len(events) == hubBatch {
			h.Wake() // more are ready now
		}
	}
}

func (h *Hub) deliver(account string, events []Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	last := events[len(events)-1].Sequence
	for _, sub := range slices.Clone(h.subs[account]) {
		if sub.pos >= last {
			continue
		}
		var batch []Event
		for _, e := range events {
			if e.Sequence > sub.pos && e.VisibleTo(sub.caller) && (len(sub.types) == 0 || slices.Contains(sub.types, e.Type)) {
				batch = append(batch, e)
			}
		}
		if len(batch) > 0 {
			select {
			case sub.events <- batch:
			default:
				h.remove(sub, ErrSlowReader)
				continue
			}
		}
		sub.pos = last
	}
}
