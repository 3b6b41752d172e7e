package conversations

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Relay copies the pending events that changes recorded on their
// documents into each account's log, where they get their sequence
// (contract 11.1), then clears them from the documents. Every replica runs
// one; they need no lease, because each step is safe to repeat and to race:
//
//  1. FindPending reads documents carrying pending events, oldest first.
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
}

// relayBatch is how many documents one read of pending events returns.
const relayBatch = 100

// maxSequenceAttempts bounds the numbers one event tries; each failed
// attempt means another relay stored an event of the same account.
const maxSequenceAttempts = 1000

// Run relays every interval, and at once when wake receives, until ctx
// ends.
func (r *Relay) Run(ctx context.Context, interval time.Duration, wake <-chan struct{}) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if _, err := r.RelayOnce(ctx); err != nil && ctx.Err() == nil && r.Logger != nil {
			r.Logger.Warn("relay events", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-wake:
		}
	}
}

// RelayOnce copies every event pending now and returns how many it
// appended (events another relay copied first are not counted).
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	copied := 0
	defer func() {
		if copied > 0 && r.Copied != nil {
			r.Copied(copied)
		}
	}()
	first := true
	for {
		batch, err := r.Store.FindPending(ctx, relayBatch)
		if err != nil {
			return copied, err
		}
		if first && r.Lag != nil {
			r.Lag(r.lag(batch))
		}
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
			n, err := r.copy(ctx, e)
			if err != nil {
				return copied, err
			}
			copied += n
		}
		for _, p := range batch {
			if _, err := r.Store.ClearPending(ctx, p.Source); err != nil {
				return copied, err
			}
		}
		if len(batch) < relayBatch {
			return copied, nil
		}
	}
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
// 0 when the log held it already.
func (r *Relay) copy(ctx context.Context, e Event) (int, error) {
	newest, err := r.Store.NewestSequence(ctx, e.AccountID)
	if err != nil {
		return 0, err
	}
	for range maxSequenceAttempts {
		e.Sequence = newest + 1
		err := r.Store.AppendEvent(ctx, e)
		switch {
		case err == nil:
			return 1, nil
		case errors.Is(err, ErrDuplicateID):
			return 0, nil
		case errors.Is(err, ErrSequenceTaken):
			if newest, err = r.Store.NewestSequence(ctx, e.AccountID); err != nil {
				return 0, err
			}
			newest = max(newest, e.Sequence)
		default:
			return 0, err
		}
	}
	return 0, fmt.Errorf("event %s: no free sequence after %d attempts", e.ID, maxSequenceAttempts)
}

// ListEvents returns one page of the feed of q.Caller (contract 11.2):
// the events after q.After it may see, oldest first, and the position to
// continue from.
func (s *Service) ListEvents(ctx context.Context, q EventQuery) (EventPage, error) {
	account := q.Caller.AccountID
	floor, err := s.Store.PurgedThrough(ctx, account)
	if err != nil {
		return EventPage{}, err
	}
	after := floor
	if q.After != nil {
		if *q.After < floor {
			return EventPage{}, fmt.Errorf("after %d, purged through %d: %w", *q.After, floor, ErrCursorExpired)
		}
		after = *q.After
	}
	r := EventRange{AccountID: account, Types: q.Types, After: after, Limit: q.Limit}
	narrow := !q.Caller.Client || len(q.Types) > 0
	if narrow {
		// A narrow view continues from the newest event examined, seen or
		// not: read before the page, so that nothing appended meanwhile is
		// passed over.
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
	// A purge that ran since the position was checked may have deleted
	// events after it: a page that does not start right after it says so.
	if len(events) == 0 || events[0].Sequence != after+1 {
		if floor, err = s.Store.PurgedThrough(ctx, account); err != nil {
			return EventPage{}, err
		}
		if after < floor {
			return EventPage{}, fmt.Errorf("after %d, purged through %d: %w", after, floor, ErrCursorExpired)
		}
	}
	return page, nil
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
	for range 1000 {
		old, err := s.Store.OldEvents(ctx, before, 1000)
		if err != nil || len(old) == 0 {
			return deleted, err
		}
		through := map[string]int64{}
		for _, e := range old {
			through[e.AccountID] = max(through[e.AccountID], e.Sequence)
		}
		progress := false
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
			progress = progress || n > 0
		}
		if !progress {
			// Only each account's newest event is old: kept.
			return deleted, nil
		}
	}
	return deleted, nil
}

// typeRank orders events of one time: a message before the change of
// status it caused.
func typeRank(t EventType) int {
	if t == EventMessageCreated {
		return 0
	}
	return 1
}
