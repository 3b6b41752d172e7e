package conversations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/acme/platform/pkg/validation"
)

// Service is the one place where the rules of conversations and messages
// are applied: who may read and change a conversation (Caller.MayAccess), what
// each change does (Patch.Apply, Conversation.AddParticipant, ...,
// RecordMessage), a closed conversation refusing messages, the
// compare-and-set retry of a change, the repair of a post that stopped
// between its two writes, and idempotent creation. Every HTTP handler calls
// one of its methods; the Store below it only persists and queries.
//
// Every change of a conversation goes through change, which hands the
// Store one Change (the state read, the state to store and the events it
// records) for one single-document conditional update, so that a change
// and its events are stored together or not at all. A new conversation
// and a new message carry their event in their own insert. The Relay
// copies those pending events into the account's ordered log.
type Service struct {
	Store Store
	// Logger receives what fails after a response is decided (nil: none).
	Logger *slog.Logger
	// Now is the clock of changes and idempotency keys; nil means
	// time.Now.
	Now func() time.Time
	// Recorded, when set, is told how many events each stored change
	// recorded (pending, for the Relay) and of which account: the metric
	// of events recorded, and the wake-up of the Relay that orders the
	// account's partition, so that it copies them at once.
	Recorded func(accountID string, n int)

	// floors caches the accounts' purge positions (ListEvents).
	floors sync.Map
}

func (s *Service) recorded(accountID string, n int) {
	if n > 0 && s.Recorded != nil {
		s.Recorded(accountID, n)
	}
}

// now is the current time at the stored precision (milliseconds, UTC).
func (s *Service) now() time.Time {
	t := time.Now()
	if s.Now != nil {
		t = s.Now()
	}
	return t.UTC().Truncate(time.Millisecond)
}

// CreateConversation stores c (as NewConversation.Conversation made it) as
// who; createdAt and updatedAt are now. A c.ID given (an idempotent retry's
// reserved id) is kept, and when the account already holds a conversation
// with that id it is returned as it is (if who may access it) instead of a
// second one; an empty c.ID gets a new one.
func (s *Service) CreateConversation(ctx context.Context, who Caller, c Conversation) (Conversation, error) {
	now := s.now()
	if c.ID == "" {
		c.ID = NewConversationID()
	}
	c.AccountID = who.AccountID
	c.CreatedAt, c.UpdatedAt, c.Version = now, now, 1
	err := s.Store.InsertConversation(ctx, c, createdEvent(c))
	if errors.Is(err, ErrDuplicateID) {
		return s.GetConversation(ctx, who, c.ID)
	}
	if err != nil {
		return Conversation{}, err
	}
	s.recorded(c.AccountID, 1)
	return c, nil
}

// GetConversation returns the conversation id if who may access it, else
// ErrNotFound: for anyone else it does not exist.
func (s *Service) GetConversation(ctx context.Context, who Caller, id string) (Conversation, error) {
	c, err := s.Store.FindConversation(ctx, who.AccountID, id)
	if err != nil {
		return Conversation{}, err
	}
	if !who.MayAccess(c) {
		return Conversation{}, fmt.Errorf("conversation %q: %w", id, ErrNotFound)
	}
	return c, nil
}

// ListConversations returns one page of the conversations q.Caller may
// see: those of its account it takes part in, or all of them for a service
// client.
func (s *Service) ListConversations(ctx context.Context, q ListQuery) (Page, error) {
	sq := ConversationQuery{
		AccountID: q.Caller.AccountID, Participant: q.Caller.ID,
		Status: q.Status, UpdatedAfter: q.UpdatedAfter, Limit: q.Limit, After: q.After,
	}
	if q.Caller.Client {
		sq.Participant = ""
	}
	return s.Store.ListConversations(ctx, sq)
}

// UpdateConversation applies patch under cond (see change).
func (s *Service) UpdateConversation(ctx context.Context, who Caller, id string, patch Patch, cond Precondition) (Conversation, error) {
	return s.change(ctx, who, id, cond, nil, func(c *Conversation, now time.Time) (bool, error) {
		return patch.Apply(c, now), nil
	})
}

// AddParticipant adds userID under cond; adding a present one changes
// nothing, the 101st is ErrTooManyParticipants.
func (s *Service) AddParticipant(ctx context.Context, who Caller, id, userID string, cond Precondition) (Conversation, error) {
	return s.change(ctx, who, id, cond, nil, func(c *Conversation, now time.Time) (bool, error) {
		return c.AddParticipant(userID, now)
	})
}

// RemoveParticipant removes userID under cond; removing an absent one
// changes nothing, the last is ErrLastParticipant.
func (s *Service) RemoveParticipant(ctx context.Context, who Caller, id, userID string, cond Precondition) (Conversation, error) {
	return s.change(ctx, who, id, cond, nil, func(c *Conversation, now time.Time) (bool, error) {
		return c.RemoveParticipant(userID, now)
	})
}

// change reads the conversation id who may access (or starts from read,
// when the caller has just read it), applies apply to a copy, and stores
// the result with one compare-and-set on the version it read. A lost
// compare-and-set means another change came first: with an If-Match that
// names versions, that is ErrPreconditionFailed (the caller's tag is stale
// now); otherwise the change is applied again to the new state, up to
// MaxChangeAttempts times (then ErrContended). A change that changes
// nothing writes nothing.
func (s *Service) change(ctx context.Context, who Caller, id string, cond Precondition,
	read *Conversation, apply func(c *Conversation, now time.Time) (bool, error)) (Conversation, error) {
	for range MaxChangeAttempts {
		var cur Conversation
		if read != nil {
			cur, read = *read, nil
		} else {
			var err error
			if cur, err = s.GetConversation(ctx, who, id); err != nil {
				return Conversation{}, err
			}
		}
		if !cond.Matches(cur.Version) {
			return Conversation{}, fmt.Errorf("conversation %q at version %d: %w", id, cur.Version, ErrPreconditionFailed)
		}
		next := cur
		next.Participants = slices.Clone(cur.Participants)
		changed, err := apply(&next, s.now())
		if err != nil {
			return Conversation{}, fmt.Errorf("conversation %q: %w", id, err)
		}
		if !changed {
			return cur, nil
		}
		next.Version = cur.Version + 1
		events := eventsOfChange(cur, next)
		won, err := s.Store.SaveConversation(ctx, Change{From: cur, To: next, Events: events})
		if err != nil {
			return Conversation{}, err
		}
		if won {
			s.recorded(next.AccountID, len(events))
			return next, nil
		}
		if cond.Given && !cond.Any {
			return Conversation{}, fmt.Errorf("conversation %q changed after version %d: %w", id, cur.Version, ErrPreconditionFailed)
		}
	}
	return Conversation{}, fmt.Errorf("conversation %q: %w", id, ErrContended)
}

// PostMessage posts m (Body and Metadata set, as NewMessage.Message made
// it; a given ID, an idempotent retry's reserved one, is kept) to the
// conversation m.ConversationID as who: ErrNotFound when who may not
// access it, ErrConversationClosed when it is closed. The order of its
// writes, and what each crash leaves:
//
//  1. read the conversation (access, closed, its updatedAt);
//  2. insert the message, created at Conversation.MessageTime: the commit
//     point. A crash before it leaves nothing;
//  3. record it in the conversation (Conversation.RecordMessage, one
//     compare-and-set; a snoozed conversation reopens). A crash between 2
//     and 3 leaves a message that is listed but whose conversation still
//     shows the previous lastMessageAt, updatedAt and (snoozed) status.
//     The next post records it implicitly (its own message is later), and
//     every GetMessage and ListMessages records the newest message it
//     returns when the conversation has not (repair): the first page of
//     messages, the first thing a reader asks for, starts with the newest
//     message. A retry with the same Idempotency-Key reuses the message's
//     id, finds it stored, and does step 3 itself.
func (s *Service) PostMessage(ctx context.Context, who Caller, m Message) (Message, error) {
	conv, err := s.GetConversation(ctx, who, m.ConversationID)
	if err != nil {
		return Message{}, err
	}
	if conv.Status == StatusClosed {
		return Message{}, fmt.Errorf("conversation %q: %w", conv.ID, ErrConversationClosed)
	}
	m.AccountID, m.Author, m.CreatedAt = who.AccountID, who.Author(), conv.MessageTime(s.now())
	if m.ID == "" {
		m.ID = NewMessageID()
	}
	if len(m.Metadata) == 0 {
		m.Metadata = []byte(`{}`)
	}
	err = s.Store.InsertMessage(ctx, m, messageEvent(conv, m))
	if errors.Is(err, ErrDuplicateID) {
		// An idempotent retry whose first attempt stored it (and its
		// event).
		m, err = s.Store.FindMessage(ctx, who.AccountID, m.ConversationID, m.ID)
	} else if err == nil {
		s.recorded(m.AccountID, 1)
	}
	if err != nil {
		return Message{}, err
	}
	if err := s.recordMessage(ctx, who, &conv, m.CreatedAt); err != nil {
		return Message{}, err
	}
	return m, nil
}

// GetMessage returns a message of a conversation who may access
// (ErrNotFound otherwise), and records it in the conversation when a post
// stopped before doing so.
func (s *Service) GetMessage(ctx context.Context, who Caller, conversationID, messageID string) (Message, error) {
	conv, err := s.GetConversation(ctx, who, conversationID)
	if err != nil {
		return Message{}, err
	}
	m, err := s.Store.FindMessage(ctx, who.AccountID, conversationID, messageID)
	if err != nil {
		return Message{}, err
	}
	if err := s.repair(ctx, who, &conv, m.CreatedAt); err != nil {
		return Message{}, err
	}
	return m, nil
}

// ListMessages returns one page of the messages of a conversation q.Caller
// may access (ErrNotFound otherwise), newest first, and records the newest
// in the conversation when a post stopped before doing so.
func (s *Service) ListMessages(ctx context.Context, q MessageQuery) (MessagePage, error) {
	conv, err := s.GetConversation(ctx, q.Caller, q.ConversationID)
	if err != nil {
		return MessagePage{}, err
	}
	page, err := s.Store.ListMessages(ctx, MessageRange{
		AccountID: q.Caller.AccountID, ConversationID: q.ConversationID, Limit: q.Limit, After: q.After,
	})
	if err != nil {
		return MessagePage{}, err
	}
	if len(page.Messages) > 0 {
		// The newest message of the page is its first.
		if err := s.repair(ctx, q.Caller, &conv, page.Messages[0].CreatedAt); err != nil {
			return MessagePage{}, err
		}
	}
	return page, nil
}

// repair records a message created at that a read returned, when conv (as
// read) has not recorded it: the trace of a post that stopped between its
// two writes. Usually conv has, and repair writes nothing.
func (s *Service) repair(ctx context.Context, who Caller, conv *Conversation, at time.Time) error {
	if probe := *conv; !probe.RecordMessage(at) {
		return nil
	}
	return s.recordMessage(ctx, who, conv, at)
}

// recordMessage is step 3 of PostMessage, starting from conv as read.
func (s *Service) recordMessage(ctx context.Context, who Caller, conv *Conversation, at time.Time) error {
	_, err := s.change(ctx, who, conv.ID, Precondition{}, conv,
		func(c *Conversation, _ time.Time) (bool, error) { return c.RecordMessage(at), nil })
	if err != nil {
		return fmt.Errorf("record message: %w", err)
	}
	return nil
}

// ClaimIdempotencyKey returns the record of rec's key: the stored one if it
// was made within IdempotencyTTL (whatever its fingerprint: the caller
// compares), otherwise rec, stored with CreatedAt now. A record older than
// the TTL that the purge has not removed yet is deleted (only if it is
// still that record) and claimed afresh. Concurrent claims of one key all
// return the same record.
func (s *Service) ClaimIdempotencyKey(ctx context.Context, rec IdempotencyRecord) (IdempotencyRecord, error) {
	for range 5 {
		now := s.now()
		rec.CreatedAt = now
		got, err := s.Store.ClaimIdempotencyKey(ctx, rec)
		if err != nil {
			return IdempotencyRecord{}, err
		}
		if now.Sub(got.CreatedAt) < IdempotencyTTL {
			return got, nil
		}
		if err := s.Store.DeleteIdempotencyKey(ctx, got); err != nil {
			return IdempotencyRecord{}, err
		}
	}
	return IdempotencyRecord{}, errors.New("claim idempotency key: claimed and expired concurrently too often")
}

// SaveIdempotentResult stores what the first request with key created.
func (s *Service) SaveIdempotentResult(ctx context.Context, key IdempotencyKey, created Created) error {
	return s.Store.SaveIdempotentResult(ctx, key, created)
}

// PurgeIdempotencyKeys deletes the keys made IdempotencyTTL or longer
// before t. It stands in for a TTL index, which the embedded store lacks.
func (s *Service) PurgeIdempotencyKeys(ctx context.Context, t time.Time) (int64, error) {
	return s.Store.DeleteIdempotencyKeysBefore(ctx, t.UTC().Add(-IdempotencyTTL))
}

// Idempotency is what a creating request says about its retries: the
// values of its Idempotency-Key header (none, or one key), and its
// fingerprint (what identifies the request: the HTTP layer hashes method,
// path and body).
type Idempotency struct {
	Keys        []string
	Fingerprint string
}

// CreateConversationOnce validates in and creates the conversation as who,
// at most once per idempotency key (see idempotent). A retry gets the
// conversation as the first request created it, replayed.
func (s *Service) CreateConversationOnce(ctx context.Context, who Caller, in NewConversation, idem Idempotency) (
	created Conversation, replayed bool, err error) {
	conv, err := in.Conversation(who)
	if err != nil {
		return Conversation{}, false, err
	}
	return idempotent(ctx, s, who, idem, NewConversationID, func(id string) (Conversation, error) {
		conv.ID = id
		return s.CreateConversation(ctx, who, conv)
	}, func(c Conversation) Created { return Created{Conversation: &c} },
		func(c Created) *Conversation { return c.Conversation })
}

// PostMessageOnce validates in and posts it to conversationID as who, at
// most once per idempotency key (see idempotent). A retry gets the message
// as the first request posted it, replayed.
func (s *Service) PostMessageOnce(ctx context.Context, who Caller, conversationID string, in NewMessage, idem Idempotency) (
	posted Message, replayed bool, err error) {
	msg, err := in.Message(who, conversationID)
	if err != nil {
		return Message{}, false, err
	}
	return idempotent(ctx, s, who, idem, NewMessageID, func(id string) (Message, error) {
		msg.ID = id
		return s.PostMessage(ctx, who, msg)
	}, func(m Message) Created { return Created{Message: &m} },
		func(c Created) *Message { return c.Message })
}

// idempotent runs create honouring the request's Idempotency-Key (see the
// OpenAPI document's Idempotency-Key parameter):
//
//   - without one, create runs with a fresh id ("": the Service's);
//   - with one, the key is claimed for the caller (one upsert): the first
//     request reserves the id of the resource and leaves its fingerprint.
//     A later request with the key and another fingerprint is
//     ErrIdempotencyKeyReused; one that finds what the first created gets
//     it again (replayed); one that finds nothing (the first is still running,
//     or failed, or stopped before saving) runs create with the reserved
//     id, and the resource already stored under it is returned rather
//     than a second made. So concurrent duplicates both succeed with one
//     resource, and no request ever waits for another.
//
// Failed requests save nothing: a retry with the same key and body runs
// again (and still creates at most one resource).
//
// save wraps what create made for the store; saved finds it in what the
// store kept (nil: not of this kind).
func idempotent[T any](ctx context.Context, s *Service, who Caller, idem Idempotency, newID func() string,
	create func(resourceID string) (T, error), save func(T) Created, saved func(Created) *T) (T, bool, error) {
	var none T
	if len(idem.Keys) == 0 {
		made, err := create("")
		return made, false, err
	}
	if len(idem.Keys) > 1 || !validIdempotencyKey(idem.Keys[0]) {
		var invalid validation.Collector
		invalid.Add("Idempotency-Key", "must be given once, as 1 to 255 printable ASCII characters")
		return none, false, invalid.Err()
	}
	key := IdempotencyKey{AccountID: who.AccountID, Caller: who.KeyOwner(), Key: idem.Keys[0]}
	rec, err := s.ClaimIdempotencyKey(ctx, IdempotencyRecord{IdempotencyKey: key, Fingerprint: idem.Fingerprint, ResourceID: newID()})
	if err != nil {
		return none, false, err
	}
	if rec.Fingerprint != idem.Fingerprint {
		return none, false, ErrIdempotencyKeyReused
	}
	if rec.Created != nil {
		if first := saved(*rec.Created); first != nil {
			return *first, true, nil
		}
	}
	made, err := create(rec.ResourceID)
	if err != nil {
		return none, false, err
	}
	if err := s.SaveIdempotentResult(ctx, key, save(made)); err != nil && s.Logger != nil {
		// The resource exists; a retry finds it under the reserved id
		// and creates nothing, so this answer stands.
		s.Logger.WarnContext(ctx, "save idempotent result", "error", err.Error())
	}
	return made, false, nil
}

func validIdempotencyKey(k string) bool {
	if len(k) < 1 || len(k) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}
