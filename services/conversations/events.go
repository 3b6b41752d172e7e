package conversations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"
)

// EventType names what changed.
type EventType string

// The event types of the contract.
const (
	EventConversationCreated = EventType("conversation.created")
	EventConversationUpdated = EventType("conversation.updated")
	EventParticipantAdded    = EventType("conversation.participant_added")
	EventParticipantRemoved  = EventType("conversation.participant_removed")
	EventMessageCreated      = EventType("message.created")
)

// EventTypes are every type, in the contract's order.
var EventTypes = []EventType{
	EventConversationCreated, EventConversationUpdated,
	EventParticipantAdded, EventParticipantRemoved, EventMessageCreated,
}

// Valid reports whether t is one of the contract's types.
func (t EventType) Valid() bool { return slices.Contains(EventTypes, t) }

// Event is one change of a conversation, as the feed, the stream and the
// webhooks serve it. It is recorded, pending, by the
// change's own single-document write (on the conversation, or on the
// message for message.created) and copied by the Relay into its account's
// log, where it gets its Sequence.
type Event struct {
	ID        string    `json:"id"` // evt_…, unique
	AccountID string    `json:"-"`
	Type      EventType `json:"type"`
	// Sequence orders the events of one account: it increases in the
	// order the log serves them (gaps allowed). 0 while pending.
	Sequence int64 `json:"sequence"`
	// Timestamp is when the change happened (ms, UTC).
	Timestamp      time.Time `json:"timestamp"`
	ConversationID string    `json:"-"`
	// Audience are the users who may see the event: the conversation's
	// participants at the time of the change, and a removed participant
	// its own removal. A service client with conversations:read sees
	// every event of its account.
	Audience []string  `json:"-"`
	Data     EventData `json:"data"`
	// RawData is Data as the log stores it (JSON), set on the events a
	// store reads: served as it is, without decoding. Data is then zero;
	// DecodeData returns it.
	RawData json.RawMessage `json:"-"`
	// Trace is the W3C traceparent of the traced request whose change
	// recorded the event ("" when none was): the relay round and the
	// webhook deliveries of the event link to it.
	Trace string `json:"-"`
}

// MarshalJSON encodes e as the feed serves it: id, type, sequence,
// timestamp and data.
func (e Event) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil) }

// AppendJSON appends e's JSON to b. RawData, when set (an event read from
// the log), is written as it is: it was encoded by this package when the
// event was recorded, so it is not decoded and validated again for every
// reader.
func (e Event) AppendJSON(b []byte) ([]byte, error) {
	data := e.RawData
	if data == nil {
		var err error
		if data, err = json.Marshal(e.Data); err != nil {
			return nil, err
		}
	}
	id, err := json.Marshal(e.ID)
	if err != nil {
		return nil, err
	}
	typ, err := json.Marshal(e.Type)
	if err != nil {
		return nil, err
	}
	b = append(b, `{"id":`...)
	b = append(b, id...)
	b = append(b, `,"type":`...)
	b = append(b, typ...)
	b = append(b, `,"sequence":`...)
	b = strconv.AppendInt(b, e.Sequence, 10)
	b = append(b, `,"timestamp":"`...)
	b = e.Timestamp.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","data":`...)
	b = append(b, data...)
	return append(b, '}'), nil
}

// DecodeData returns e's data, decoding RawData when a store read e.
func (e Event) DecodeData() (EventData, error) {
	if e.RawData == nil {
		return e.Data, nil
	}
	var d EventData
	if err := json.Unmarshal(e.RawData, &d); err != nil {
		return EventData{}, fmt.Errorf("event %s: decode data: %w", e.ID, err)
	}
	return d, nil
}

// EventData is an event's data: the conversation after the change, and
// what the type adds.
type EventData struct {
	Conversation Conversation `json:"conversation"`
	// Changes (conversation.updated) names each changed field with its
	// previous value.
	Changes map[string]any `json:"changes,omitempty"`
	// UserID (participant_added, participant_removed) is whom the change
	// concerns.
	UserID string `json:"userId,omitempty"`
	// Message (message.created) is the message posted.
	Message *Message `json:"message,omitempty"`
}

// VisibleTo reports whether who may see e: a service
// client every event of its account, a user the events of the
// conversations it took part in at the time.
func (e Event) VisibleTo(who Caller) bool {
	return e.AccountID == who.AccountID && (who.Client || slices.Contains(e.Audience, who.ID))
}

// NewEventID returns a fresh event id: "evt_" and 96 random bits.
func NewEventID() string { return newID("evt_") }

// Limits of the feed.
const (
	DefaultEventPageSize = 100
	MaxEventPageSize     = 1000
	// DefaultEventRetention is how long events are kept.
	DefaultEventRetention = 30 * 24 * time.Hour
)

// ErrCursorExpired: a feed position below what the purge deleted; the
// consumer resynchronises with updatedAfter.
var ErrCursorExpired = errors.New("position below the purged events")

// ErrSequenceTaken: the log already holds an event of the account with
// that sequence (another relay took the number): take the next one.
var ErrSequenceTaken = errors.New("sequence already taken")

// EventRange selects events of one account from its log: the events after
// sequence After, up to and including Through (0: no bound), oldest
// first, at most Limit.
type EventRange struct {
	AccountID string
	// Audience keeps only the events this user may see; "" keeps all.
	Audience string
	// Types keeps only these types; empty keeps all.
	Types   []EventType
	After   int64
	Through int64
	Limit   int
}

// Pending is a document's events not yet copied into the log: Source
// names the document (and the state it was read in) for ClearPending.
type Pending struct {
	Source PendingSource
	Events []Event
	// Since is when the oldest of them was recorded.
	Since time.Time
}

// PendingSource is a document carrying pending events, as read.
type PendingSource struct {
	Collection string
	ID         string
	// Version is the conversation's version when read (messages: 0);
	// ClearPending clears only while it holds, so an event recorded by a
	// later change stays.
	Version int64
}

// PendingSlots is the number of slots the accounts hash into
// (PendingSlot). It is part of the stored form: every pending event's
// document records its account's slot, so it never changes; partitions
// (RelayPartitions) are sets of slots, so their number may.
const PendingSlots = 128

// PendingSlot is the slot of an account: FNV-1a (32 bits) of its id,
// modulo PendingSlots.
func PendingSlot(accountID string) int {
	h := fnv.New32a()
	h.Write([]byte(accountID))
	return int(h.Sum32() % PendingSlots)
}

// EventStore is the account's event log and the pending events of the
// change documents. It decides no rule: the Relay, the Service and the
// Purge above it do.
//
// Events of an account after a position (for webhooks, the feed and the
// stream): ListEvents with EventRange{AccountID, After: n, Limit}; the
// events come oldest first, in increasing Sequence, and a consumer that
// repeats it with After = the last Sequence seen gets every event exactly
// once (see docs/decisions.md).
type EventStore interface {
	// FindPending returns up to limit documents that carry pending
	// events, oldest first, whose oldest pending event is stamped before
	// before, of the accounts in slots (see PendingSlot; nil: every
	// slot), and always those recorded before slots existed, which carry
	// none.
	FindPending(ctx context.Context, slots []int, before time.Time, limit int) ([]Pending, error)
	// AppendEvent stores e (Sequence set) in its account's log:
	// ErrDuplicateID when the log holds e.ID already (copied before),
	// ErrSequenceTaken when it holds another event with e.Sequence.
	AppendEvent(ctx context.Context, e Event) error
	// ClearPending removes the events read in p from their document, if
	// the document is still in the state read; false when it was not
	// (the relay reads it again).
	ClearPending(ctx context.Context, p PendingSource) (bool, error)
	// NewestSequence is the highest sequence in the account's log (0:
	// none yet).
	NewestSequence(ctx context.Context, accountID string) (int64, error)
	// ListEvents returns the events r selects, in increasing Sequence.
	ListEvents(ctx context.Context, r EventRange) ([]Event, error)
	// PurgedThrough is the highest sequence the purge of the account
	// deleted through (0: nothing purged).
	PurgedThrough(ctx context.Context, accountID string) (int64, error)
	// OldEvents returns up to limit events with a timestamp from since
	// (inclusive) to before (exclusive), oldest first: what the purge
	// considers.
	OldEvents(ctx context.Context, since, before time.Time, limit int) ([]Event, error)
	// RecordPurge raises the account's purge position to through (never
	// lowers it); DeleteEventsThrough then deletes the account's events
	// with sequences up to it.
	RecordPurge(ctx context.Context, accountID string, through int64) error
	DeleteEventsThrough(ctx context.Context, accountID string, through int64) (int64, error)
}
