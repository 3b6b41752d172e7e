package conversations

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/platform/pkg/tracing"
)

// Relay copies the pending events that changes recorded on their
// documents into each account's log, where they get their sequence
// (docs/decisions.md, events), then clears them from the documents. With Partitions,
// a replica's relay orders only the accounts of the partitions it leases,
// so that one relay at a time orders an account and the work per event
// does not grow with the replicas; each step is still safe to repeat and
// to race, so the order survives two relays that overlap (a holder paused
// past its lease that its fence did not stop, replicas configured with
// different partition counts):
//
//  1. FindPending reads documents carrying pending events, oldest first,
//     whose pending events all began before the round's horizon (see
//     horizon): conversations and messages are two reads, and a change
//     made between them must not let its successor pass it.
//  2. Each event is appended with sequence = the account's newest + 1
//     under the log's unique {account_id, sequence} index: a duplicate
//     sequence means another relay took the number, so the next is tried;
//     a duplicate event id means the event was copied already (by another
//     relay, or by this one before a crash), so it is skipped.
//  3. ClearPending removes the events from the document only while the
//     document is still in the state read; a change recorded since keeps
//     its event for the next round.
//
// A crash before 2 leaves the events pending; between 2 and 3, copied and
// still pending (the next round skips them by id and clears them). A number
// is only ever taken after the one below it is stored, so a consumer that
// has seen sequence n has no event below n still to come.
type Relay struct {
	Store EventStore
	// Logger receives the failures of a round (nil: none).
	Logger *slog.Logger
	// Now is the clock of the lag; nil means time.Now.
	Now func() time.Time
	// Lag, when set, is told after every round the age of the oldest
	// event still pending when the round began (0: none).
	Lag func(time.Duration)
	// Copied, when set, is told of the events a round appended (the
	// stream hub wakes at once on it).
	Copied func(n int)
	// Ordered, when set, is told of the accounts a round appended events
	// of (their webhooks are fanned out by this replica).
	Ordered func(accountIDs []string)
	// Partitions, when set, limits the relay to the partitions this
	// replica leases, each command fenced by its partition's lease; nil:
	// every account (one relay, or tests).
	Partitions *RelayPartitions
	// Woken, when set, reports whether the changes made on other replicas
	// wake this one's relay (RelayPartitions.PeersWake): its polls that
	// find nothing then space out to relayWokenIdlePolls intervals.
	Woken func() bool
}

// relayMaxBackoff is the longest wait between rounds after failures.
const relayMaxBackoff = 5 * time.Second

// relayIdlePolls bounds the wait between polls that find nothing, in
// poll intervals; relayWokenIdlePolls when every replica wakes the
// holder of the changes it records (the poll then finds only what a
// wake missed: one sent to a former holder, or lost).
const (
	relayIdlePolls      = 4
	relayWokenIdlePolls = 32
)

// relayBatch is how many documents one read of pending events returns.
const relayBatch = 100

// maxSequenceAttempts bounds the numbers one event tries; each failed
// attempt means another relay stored an event of the same account.
const maxSequenceAttempts = 1000

// Run relays every interval, and at once when wake receives, until ctx
// ends. A round that copied something is followed by another at once:
// changes made on other replicas wake only the poll, and under load they
// keep coming. Rounds that find nothing space the polls out, up to
// relayIdlePolls intervals: a change on this replica wakes it at once
// anyway, and one on another replica is found within that, or, when the
// other replicas wake it (Woken), at once.
func (r *Relay) Run(ctx context.Context, interval time.Duration, wake <-chan struct{}) {
	wait := interval
	for {
		n, err := r.RelayOnce(ctx)
		switch {
		case err == nil && n > 0:
			wait = 0
		case err == nil:
			most := relayIdlePolls
			if r.Woken != nil && r.Woken() {
				most = relayWokenIdlePolls
			}
			wait = min(max(2*wait, interval), time.Duration(most)*interval)
		case ctx.Err() != nil:
			return
		default:
			// The database is unreachable or failing: ask again less and
			// less often (up to relayMaxBackoff), so that a recovering
			// database is not queried several times a second, while the
			// requests that need it connect first.
			wait = min(max(2*wait, interval), relayMaxBackoff)
			if r.Logger != nil {
				r.Logger.Warn("relay events", "error", err.Error(), "retry_in", wait.String())
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-wake:
			t.Stop()
		}
	}
}

// RelayOnce copies every event pending now (of the partitions held, with
// Partitions) and returns how many it appended (events another relay
// copied first are not counted).
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	var slots []int
	if r.Partitions != nil {
		var held bool
		if slots, held = r.Partitions.slots(); !held {
			if r.Lag != nil {
				r.Lag(0) // nothing of this replica's waits
			}
			return 0, nil
		}
	}
	copied := 0
	accounts := map[string]bool{}
	defer func() {
		if copied > 0 && r.Copied != nil {
			r.Copied(copied)
		}
		if len(accounts) > 0 && r.Ordered != nil {
			r.Ordered(slices.Collect(maps.Keys(accounts)))
		}
	}()
	// The newest sequence of each account this round knows of: read once,
	// then the one it appended itself, so that a batch of an account's
	// events costs one read of the newest, not one per event.
	newest := map[string]int64{}
	first := true
	start := time.Now()
	before := horizon(start)
	// A round that finds events is a span linked to the requests that
	// recorded them (roundSpan); one that finds none makes no span.
	var span trace.Span
	defer func() {
		if span != nil {
			span.SetAttributes(attribute.Int("acme.events.ordered", copied))
			span.End()
		}
	}()
	for {
		fenced, done, held := r.fence(ctx, "")
		if !held {
			return copied, nil
		}
		batch, err := r.Store.FindPending(fenced, slots, before, relayBatch)
		done()
		if err != nil {
			return copied, err
		}
		if first && r.Lag != nil {
			r.Lag(r.lag(batch))
		}
		ctx, span = roundSpan(ctx, span, "relay round", start, batch)
		first = false
		// Oldest first across documents (a conversation's creation
		// before a message posted to it), each document's events in the
		// order recorded; a message before the reopening it caused (both
		// carry the message's time).
		var events []Event
		for _, p := range batch {
			events = append(events, p.Events...)
		}
		slices.SortStableFunc(events, func(a, b Event) int {
			if c := a.Timestamp.Compare(b.Timestamp); c != 0 {
				return c
			}
			return cmp.Compare(typeRank(a.Type), typeRank(b.Type))
		})
		for _, e := range events {
			n, err := r.copy(ctx, e, newest)
			if errors.Is(err, errNotHeld) {
				return copied, nil // another replica orders the rest
			}
			if err != nil {
				return copied, err
			}
			copied += n
			if n > 0 {
				accounts[e.AccountID] = true
			}
		}
		for _, p := range batch {
			fenced, done, held := r.fence(ctx, p.Events[0].AccountID)
			if !held {
				return copied, nil
			}
			_, err := r.Store.ClearPending(fenced, p.Source)
			done()
			if err != nil {
				return copied, err
			}
		}
		if len(batch) < relayBatch {
			return copied, nil
		}
	}
}

// horizon returns the time below which a round relays events: the
// millisecond after start (stores keep milliseconds), once it has passed.
//
// The documents a round reads come from two collections, read one after
// the other, and a change that commits between the two reads would be
// missing from the round while a change made after it (a message posted
// to a conversation created meanwhile) would be in it, and get the lower
// sequence. Every change is stamped before it is written, and a change
// that follows another starts after that one was written: so a change
// stamped before the horizon follows only changes written before the
// horizon, which both reads see, and a round that takes only changes
// stamped before it never takes one without those it follows. Everything
// written before the round began is stamped before the horizon. The
// stamps and the horizon are wall clocks: replicas' clocks must agree to
// within the time between two changes of one conversation (NTP keeps them
// to milliseconds); where they do not, two such events may be ordered the
// wrong way round, never lost or repeated.
func horizon(start time.Time) time.Time {
	h := start.Truncate(time.Millisecond).Add(time.Millisecond)
	time.Sleep(time.Until(h))
	return h
}

func (r *Relay) lag(batch []Pending) time.Duration {
	if len(batch) == 0 {
		return 0
	}
	oldest := slices.MinFunc(batch, func(a, b Pending) int { return cmp.Compare(a.Since.UnixNano(), b.Since.UnixNano()) })
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	return max(now.Sub(oldest.Since), 0)
}

// copy appends e with the next sequence of its account: 1 when appended,
// 0 when the log held it already. newest holds the accounts' newest
// sequences known to this round: each is stored (read as the newest, or
// appended by this round), so the number above it may be taken; one that
// another relay has passed since costs a refused insert and a read.
func (r *Relay) copy(ctx context.Context, e Event, newest map[string]int64) (int, error) {
	seq, known := newest[e.AccountID]
	if !known {
		var err error
		if seq, err = r.newestSequence(ctx, e.AccountID); err != nil {
			return 0, err
		}
	}
	for range maxSequenceAttempts {
		e.Sequence = seq + 1
		fenced, done, held := r.fence(ctx, e.AccountID)
		if !held {
			return 0, errNotHeld
		}
		err := r.Store.AppendEvent(fenced, e)
		done()
		switch {
		case err == nil:
			newest[e.AccountID] = e.Sequence
			return 1, nil
		case errors.Is(err, ErrDuplicateID):
			// Copied before, by another relay or before a crash: the
			// account's newest may be past what this round knows, so
			// the next event reads it again.
			delete(newest, e.AccountID)
			return 0, nil
		case errors.Is(err, ErrSequenceTaken):
			if seq, err = r.newestSequence(ctx, e.AccountID); err != nil {
				return 0, err
			}
			seq = max(seq, e.Sequence)
		default:
			return 0, err
		}
	}
	return 0, fmt.Errorf("event %s: no free sequence after %d attempts", e.ID, maxSequenceAttempts)
}

// errNotHeld: this replica no longer holds the partition of an event's
// account (released, or not renewed in time).
var errNotHeld = errors.New("partition not held")

// fence bounds ctx for one command of the relay for an account ("": for
// every partition held); see RelayPartitions. done is called once the
// command returned; false when the partition is not held.
func (r *Relay) fence(ctx context.Context, accountID string) (context.Context, func(), bool) {
	if r.Partitions == nil {
		return ctx, func() {}, true
	}
	return r.Partitions.fenced(ctx, accountID)
}

func (r *Relay) newestSequence(ctx context.Context, accountID string) (int64, error) {
	fenced, done, held := r.fence(ctx, accountID)
	if !held {
		return 0, errNotHeld
	}
	defer done()
	return r.Store.NewestSequence(fenced, accountID)
}

// ListEvents returns one page of the feed of q.Caller:
// the events after q.After it may see, oldest first, and the position to
// continue from.
//
// The account's purge position is taken from a cache (it changes once an
// hour at most): a position that the cache lets pass but the purge
// deleted after shows itself as a page that does not begin right after
// the position (sequences have no gaps but the purge's), and such a page,
// or an empty one, is checked against the stored position. An empty page
// that keeps the caller's own position (nothing after it in the log, the
// usual answer to a consumer polling at the head) is not: it serves
// nothing and moves nothing, so it cannot pass over a purged event, and
// the next page from that position is checked.
func (s *Service) ListEvents(ctx context.Context, q EventQuery) (EventPage, error) {
	account := q.Caller.AccountID
	floor, err := s.purgedThrough(ctx, account, false)
	if err != nil {
		return EventPage{}, err
	}
	for {
		after := floor
		if q.After != nil {
			if *q.After < floor {
				return EventPage{}, fmt.Errorf("after %d, purged through %d: %w", *q.After, floor, ErrCursorExpired)
			}
			after = *q.After
		}
		page, err := s.eventPage(ctx, q, after)
		if err != nil {
			return EventPage{}, err
		}
		if len(page.Events) > 0 && page.Events[0].Sequence == after+1 || q.After != nil && page.Next == after {
			return page, nil
		}
		stored, err := s.purgedThrough(ctx, account, true)
		if err != nil {
			return EventPage{}, err
		}
		if after >= stored {
			return page, nil
		}
		if q.After != nil {
			return EventPage{}, fmt.Errorf("after %d, purged through %d: %w", after, stored, ErrCursorExpired)
		}
		floor = stored // from the oldest kept, which has moved
	}
}

// eventPage reads one page of the feed after the position after.
func (s *Service) eventPage(ctx context.Context, q EventQuery, after int64) (EventPage, error) {
	account := q.Caller.AccountID
	r := EventRange{AccountID: account, Types: q.Types, After: after, Limit: q.Limit}
	narrow := !q.Caller.Client || len(q.Types) > 0
	if narrow {
		// A narrow view continues from the newest event examined, seen or
		// not: read before the page, so that nothing appended meanwhile is
		// passed over.
		var err error
		if r.Through, err = s.Store.NewestSequence(ctx, account); err != nil {
			return EventPage{}, err
		}
		if r.Through <= after {
			return EventPage{Events: []Event{}, Next: after}, nil
		}
		if !q.Caller.Client {
			r.Audience = q.Caller.ID
		}
	}
	events, err := s.Store.ListEvents(ctx, r)
	if err != nil {
		return EventPage{}, err
	}
	page := EventPage{Events: events, Next: after}
	switch {
	case len(events) == q.Limit:
		page.Next = events[len(events)-1].Sequence
	case narrow:
		page.Next = r.Through
	case len(events) > 0:
		page.Next = events[len(events)-1].Sequence
	}
	return page, nil
}

// floorCacheTTL is how long a purge position read is used before it is
// read again (see ListEvents for why a stale one is safe).
const floorCacheTTL = 10 * time.Second

type cachedFloor struct {
	sequence int64
	read     time.Time
}

// purgedThrough is the account's purge position, from the cache unless
// fresh is set or the cached one is older than floorCacheTTL.
func (s *Service) purgedThrough(ctx context.Context, accountID string, fresh bool) (int64, error) {
	if !fresh {
		if v, ok := s.floors.Load(accountID); ok {
			if c := v.(cachedFloor); time.Since(c.read) < floorCacheTTL {
				return c.sequence, nil
			}
		}
	}
	floor, err := s.Store.PurgedThrough(ctx, accountID)
	if err != nil {
		return 0, err
	}
	s.floors.Store(accountID, cachedFloor{sequence: floor, read: time.Now()})
	return floor, nil
}

// EventQuery selects a page of the feed.
type EventQuery struct {
	Caller Caller
	// After is the position to continue from; nil: from the oldest kept.
	After *int64
	Types []EventType // empty: every type
	Limit int         // 1..MaxEventPageSize
}

// EventPage is one page of the feed; Next is the position to continue
// from (the highest sequence examined for the caller).
type EventPage struct {
	Events []Event
	Next   int64
}

// EventFloor is where a feed or stream without a position starts, and the
// lowest position it may name: the account's purge position. A position
// below it is ErrCursorExpired.
func (s *Service) EventFloor(ctx context.Context, accountID string, after *int64) (int64, error) {
	floor, err := s.Store.PurgedThrough(ctx, accountID)
	if err != nil {
		return 0, err
	}
	if after == nil {
		return floor, nil
	}
	if *after < floor {
		return 0, fmt.Errorf("after %d, purged through %d: %w", *after, floor, ErrCursorExpired)
	}
	return *after, nil
}

// PurgeEvents deletes the events recorded retention or longer before now,
// account by account: it first records the sequence it deletes through
// (so a consumer below it gets ErrCursorExpired, never a silent gap), and
// never deletes an account's newest event, so numbering never restarts.
// It is run by one replica at a time (a lease), but is safe to repeat.
func (s *Service) PurgeEvents(ctx context.Context, now time.Time, retention time.Duration) (int64, error) {
	var deleted int64
	before := now.UTC().Add(-retention)
	// since moves forward past the old events that stay (each account's
	// newest), so that many of them never hide older ones behind them.
	since := time.Time{}
	for {
		old, err := s.Store.OldEvents(ctx, since, before, purgeBatch)
		if err != nil || len(old) == 0 {
			return deleted, err
		}
		through := map[string]int64{}
		for _, e := range old {
			through[e.AccountID] = max(through[e.AccountID], e.Sequence)
		}
		for account, seq := range through {
			newest, err := s.Store.NewestSequence(ctx, account)
			if err != nil {
				return deleted, err
			}
			seq = min(seq, newest-1)
			if seq <= 0 {
				continue
			}
			if err := s.Store.RecordPurge(ctx, account, seq); err != nil {
				return deleted, err
			}
			n, err := s.Store.DeleteEventsThrough(ctx, account, seq)
			if err != nil {
				return deleted, err
			}
			deleted += n
		}
		if len(old) < purgeBatch {
			return deleted, nil
		}
		last := old[len(old)-1].Timestamp
		if !last.After(since) {
			// A whole batch of one instant: the next starts after it.
			last = last.Add(time.Millisecond)
		}
		since = last
	}
}

// purgeBatch is how many old events one read of the purge returns.
const purgeBatch = 1000

// typeRank orders events of one time: a message before the change of
// status it caused.
func typeRank(t EventType) int {
	if t == EventMessageCreated {
		return 0
	}
	return 1
}

// roundSpan starts the span of a relay round on its first batch of
// pending events, linked to the requests that recorded them, and adds the
// links of a later batch to it; it returns ctx with the span, or as it is
// when there is no span (tracing off, or nothing pending).
func roundSpan(ctx context.Context, span trace.Span, name string, start time.Time, batch []Pending) (context.Context, trace.Span) {
	if !tracing.On() || len(batch) == 0 {
		return ctx, span
	}
	var parents []string
	for _, p := range batch {
		for _, e := range p.Events {
			parents = append(parents, e.Trace)
		}
	}
	links := tracing.Links(parents...)
	if span != nil {
		for _, l := range links {
			span.AddLink(l)
		}
		return ctx, span
	}
	return tracing.Start(ctx, name, trace.WithLinks(links...), trace.WithTimestamp(start))
}
