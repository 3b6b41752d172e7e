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
// (the stream in the OpenAPI document). A stream first catches up on its own, reading its
// backlog page by page as it takes the pages; once it reaches the head it
// joins the fan-out, where one read of each account's log per interval
// serves every stream of the account, whatever their number.
//
// What the streams hold is bounded in bytes, not in events: events handed
// to a stream and not yet written (Subscription.Sent) count against
// MaxStreamBytes for that stream and MaxBytes for the replica. A stream
// at the head that has not written what it was handed when more comes,
// beyond its bound, is dropped as slow; it reconnects with Last-Event-ID
// and loses nothing.
//
// The Hub polls only while a stream is at the head. Close ends every stream
// (at SIGTERM) and refuses new ones.
type Hub struct {
	Store EventStore
	// Interval is the time between two reads of the log (the latency of
	// an event from another replica); Wake reads at once.
	Interval time.Duration
	// MaxPerCaller bounds the streams of one caller on this replica.
	MaxPerCaller int
	// MaxBytes bounds the bytes of events handed to this replica's
	// streams and not yet written, in all; MaxStreamBytes those of one
	// stream. Zero means DefaultHubBytes and DefaultStreamBytes.
	MaxBytes       int64
	MaxStreamBytes int64
	Logger         *slog.Logger
	// Opened and Dropped, when set, count streams opened and closed (a
	// stream dropped for slowness: slow).
	Opened  func()
	Dropped func(slow bool)
	// Read, when set, counts the hub's reads of the log: what its streams
	// cost the database.
	Read func()

	mu      sync.Mutex
	all     map[*Subscription]struct{}
	subs    map[string][]*Subscription // at the head, by account
	callers map[string]int             // streams by caller
	queued  int64                      // bytes handed out, not yet written
	running bool
	closed  bool
	stop    chan struct{}
	// reading bounds the catch-up reads in flight (catchUpReads): streams
	// reconnecting at once must not crowd the requests out of the
	// database.
	readingOnce sync.Once
	reading     chan struct{}
	// wake is made once, by wakeChan: Wake may be called before any
	// stream opens, from any goroutine.
	wakeOnce sync.Once
	wake     chan struct{}
}

// The defaults of Hub.MaxBytes and Hub.MaxStreamBytes.
const (
	DefaultHubBytes    = 16 << 20
	DefaultStreamBytes = 256 << 10
)

func (h *Hub) wakeChan() chan struct{} {
	h.wakeOnce.Do(func() { h.wake = make(chan struct{}, 1) })
	return h.wake
}

// ErrTooManyStreams: the caller has MaxPerCaller streams open already.
var ErrTooManyStreams = errors.New("too many open streams")

// ErrShuttingDown: the replica is stopping; the client reconnects to
// another.
var ErrShuttingDown = errors.New("shutting down")

// streamBuffer is how many batches a stream may have waiting.
const streamBuffer = 16

// hubBatch is the most events one read of an account's log for the
// streams at its head returns.
const hubBatch = 1000

// catchUpReads is the most reads of streams' backlogs a replica makes at
// once.
const catchUpReads = 2

// catchUpPage is the most events one read of a stream's own backlog
// returns.
const catchUpPage = 100

// Subscription is one open stream: Events delivers batches of the events
// its caller may see, in increasing sequence, with no gap and no repeat;
// it is closed when the stream must end (Reason says why). The reader
// calls Sent with each batch once written.
type Subscription struct {
	Events <-chan []Event
	events chan []Event
	caller Caller
	types  []EventType

	// Guarded by the hub's lock, but for pos while catching up, which
	// only the catch-up goroutine touches.
	pos        int64 // the highest sequence examined for it
	catchingUp bool  // its own goroutine reads and sends, not the fan-out
	queued     int64 // bytes handed to it, not yet written
	reason     error
	ended      bool
	done       chan struct{} // closed when it ends
	sent       chan struct{} // a Sent released bytes (catch-up waits on it)
}

// Reason is why Events was closed: ErrSlowReader or ErrShuttingDown.
func (s *Subscription) Reason() error { return s.reason }

// ErrSlowReader: the stream did not take its events in time, or they did
// not fit the hub's bounds.
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
		h.subs, h.callers, h.all = map[string][]*Subscription{}, map[string]int{}, map[*Subscription]struct{}{}
	}
	ch := make(chan []Event, streamBuffer)
	sub := &Subscription{
		Events: ch, events: ch, caller: who, types: types, pos: after,
		catchingUp: true, done: make(chan struct{}), sent: make(chan struct{}, 1),
	}
	h.all[sub] = struct{}{}
	h.callers[key]++
	if h.Opened != nil {
		h.Opened()
	}
	go h.catchUp(sub)
	return sub, nil
}

// Unsubscribe closes sub (the stream ended); the hub stops polling when
// no stream is at the head.
func (h *Hub) Unsubscribe(sub *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.remove(sub, nil)
}

// Sent tells the hub that batch, handed to sub, was written: its bytes no
// longer count against the bounds.
func (h *Hub) Sent(sub *Subscription, batch []Event) {
	n := batchBytes(batch)
	h.mu.Lock()
	if !sub.ended {
		sub.queued -= n
		h.queued -= n
	}
	h.mu.Unlock()
	select {
	case sub.sent <- struct{}{}:
	default:
	}
}

// remove ends sub (h.mu held) with reason. Its channel is closed here when
// it is at the head, or by its catch-up goroutine, the only sender then.
func (h *Hub) remove(sub *Subscription, reason error) {
	if sub.ended {
		return
	}
	sub.ended, sub.reason = true, reason
	close(sub.done)
	h.queued -= sub.queued
	sub.queued = 0
	delete(h.all, sub)
	if !sub.catchingUp {
		close(sub.events)
		h.leaveHead(sub)
	}
	key := sub.caller.AccountID + "\x00" + sub.caller.KeyOwner()
	if h.callers[key]--; h.callers[key] <= 0 {
		delete(h.callers, key)
	}
	if h.Dropped != nil {
		h.Dropped(errors.Is(reason, ErrSlowReader))
	}
}

// leaveHead takes sub out of the fan-out (h.mu held); the polling stops
// with the last stream at the head.
func (h *Hub) leaveHead(sub *Subscription) {
	account := sub.caller.AccountID
	h.subs[account] = slices.DeleteFunc(h.subs[account], func(s *Subscription) bool { return s == sub })
	if len(h.subs[account]) == 0 {
		delete(h.subs, account)
	}
	if len(h.subs) == 0 && h.running {
		h.running = false
		close(h.stop)
	}
}

// joinHead puts sub in the fan-out (h.mu held), polling from now on.
func (h *Hub) joinHead(sub *Subscription) {
	sub.catchingUp = false
	h.subs[sub.caller.AccountID] = append(h.subs[sub.caller.AccountID], sub)
	if !h.running {
		h.running = true
		h.stop = make(chan struct{})
		go h.run(h.stop)
	}
	h.Wake()
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
	for sub := range h.all {
		h.remove(sub, ErrShuttingDown)
	}
}

// catchUp serves sub from its own position, a page at a time and no
// faster than it writes, until a page is short: sub is then at the head
// and joins the fan-out. It is the only sender on sub's channel while it
// runs.
func (h *Hub) catchUp(sub *Subscription) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sub.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		if h.Read != nil {
			h.Read()
		}
		events, err := h.readBacklog(ctx, sub)
		if err != nil {
			if ctx.Err() != nil {
				close(sub.events)
				return
			}
			if h.Logger != nil {
				h.Logger.Warn("read events for a stream", "account_id", sub.caller.AccountID, "error", err.Error())
			}
			if !h.pause(sub, h.interval()) {
				close(sub.events)
				return
			}
			continue
		}
		for _, chunk := range h.chunks(sub.visible(events)) {
			if !h.handOut(sub, chunk) {
				close(sub.events)
				return
			}
		}
		if len(events) > 0 {
			sub.pos = events[len(events)-1].Sequence
		}
		if len(events) < catchUpPage {
			h.mu.Lock()
			if sub.ended {
				h.mu.Unlock()
				close(sub.events)
				return
			}
			h.joinHead(sub)
			h.mu.Unlock()
			return
		}
	}
}

// readBacklog reads the page of sub's backlog after its position, waiting
// for one of the catchUpReads slots.
func (h *Hub) readBacklog(ctx context.Context, sub *Subscription) ([]Event, error) {
	h.readingOnce.Do(func() { h.reading = make(chan struct{}, catchUpReads) })
	select {
	case h.reading <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-h.reading }()
	return h.Store.ListEvents(ctx, EventRange{AccountID: sub.caller.AccountID, After: sub.pos, Limit: catchUpPage})
}

// handOut sends chunk to a catching-up sub once the bounds have room for
// it, waiting for the reader to write what it holds; false when sub ended.
func (h *Hub) handOut(sub *Subscription, chunk []Event) bool {
	n := batchBytes(chunk)
	for {
		h.mu.Lock()
		if sub.ended {
			h.mu.Unlock()
			return false
		}
		ok := h.reserve(sub, n)
		h.mu.Unlock()
		if ok {
			break
		}
		if !h.pause(sub, h.interval()) {
			return false
		}
	}
	select {
	case sub.events <- chunk:
		return true
	case <-sub.done:
		return false
	}
}

// pause waits for d, or for sub's reader to write something; false when
// sub ended meanwhile.
func (h *Hub) pause(sub *Subscription, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-sub.done:
		return false
	case <-sub.sent:
	case <-t.C:
	}
	return true
}

// reserve counts n more bytes as handed to sub (h.mu held), unless that
// would pass a bound; a stream or a hub holding nothing always has room
// for one batch.
func (h *Hub) reserve(sub *Subscription, n int64) bool {
	if sub.queued > 0 && sub.queued+n > h.maxStreamBytes() || h.queued > 0 && h.queued+n > h.maxBytes() {
		return false
	}
	sub.queued += n
	h.queued += n
	return true
}

func (h *Hub) maxBytes() int64       { return cmpOr(h.MaxBytes, DefaultHubBytes) }
func (h *Hub) maxStreamBytes() int64 { return cmpOr(h.MaxStreamBytes, DefaultStreamBytes) }

func cmpOr(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

func (h *Hub) interval() time.Duration {
	if h.Interval <= 0 {
		return 250 * time.Millisecond
	}
	return h.Interval
}

// chunks splits events into batches of at most one stream's bound (an
// event larger than the bound is a batch of its own).
func (h *Hub) chunks(events []Event) [][]Event {
	var out [][]Event
	limit := h.maxStreamBytes()
	start, size := 0, int64(0)
	for i, e := range events {
		n := eventBytes(e)
		if i > start && size+n > limit {
			out = append(out, events[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(events) {
		out = append(out, events[start:])
	}
	return out
}

// visible returns the events of events that sub's caller may see, of its
// types.
func (s *Subscription) visible(events []Event) []Event {
	var out []Event
	for _, e := range events {
		if e.Sequence > s.pos && e.VisibleTo(s.caller) && (len(s.types) == 0 || slices.Contains(s.types, e.Type)) {
			out = append(out, e)
		}
	}
	return out
}

// eventBytes is about what an event takes in memory and on the wire.
func eventBytes(e Event) int64 {
	return int64(len(e.RawData) + len(e.ID) + len(e.ConversationID) + 128)
}

func batchBytes(events []Event) int64 {
	var n int64
	for _, e := range events {
		n += eventBytes(e)
	}
	return n
}

func (h *Hub) run(stop <-chan struct{}) {
	ticker := time.NewTicker(h.interval())
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
// streams at the head, and hands the events out. The hub calls it every
// Interval and on Wake.
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
		h.deliver(account, after, events)
		if len(events) == hubBatch {
			h.Wake() // more are ready now
		}
	}
}

// deliver hands events, read after position after, to the account's
// streams at the head. A stream whose position is below after joined
// since the read: the events between are not in this batch, so it waits
// for the next poll, which reads from its position. A stream that would
// take more than its bound in one batch goes back to catching up on its
// own.
func (h *Hub) deliver(account string, after int64, events []Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	last := events[len(events)-1].Sequence
	for _, sub := range slices.Clone(h.subs[account]) {
		if sub.pos < after || sub.pos >= last {
			continue
		}
		if batch := sub.visible(events); len(batch) > 0 {
			n := batchBytes(batch)
			if sub.queued == 0 && n > h.maxStreamBytes() {
				h.leaveHead(sub)
				sub.catchingUp = true
				go h.catchUp(sub)
				continue
			}
			if !h.reserve(sub, n) {
				h.remove(sub, ErrSlowReader)
				continue
			}
			select {
			case sub.events <- batch:
			default:
				h.remove(sub, ErrSlowReader) // releases what it held
				continue
			}
		}
		sub.pos = last
	}
}
