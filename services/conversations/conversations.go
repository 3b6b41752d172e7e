// Package conversations is the domain of the conversations service
// (Interface B): conversations between users of one account, their
// messages and lifecycle, and the keyset-paged listings of both. It holds
// types, interfaces and the rules of the contract only; MongoDB lives in
// package mongostore, HTTP in package http, and cmd/conversations wires them.
package conversations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/acme/platform/pkg/validation"
)

// Domain errors; stores return them wrapped, the HTTP layer maps them.
var (
	// ErrNotFound: no such conversation (or message) among the caller's.
	ErrNotFound = errors.New("not found")
	// ErrConversationClosed: a message to a closed conversation.
	ErrConversationClosed = errors.New("conversation closed")
	// ErrTooManyParticipants: adding one would exceed MaxParticipants.
	ErrTooManyParticipants = errors.New("too many participants")
	// ErrLastParticipant: removing the only participant.
	ErrLastParticipant = errors.New("last participant")
	// ErrPreconditionFailed: the conversation is no longer in the state
	// the caller's If-Match names.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrContended: a change lost its compare-and-set to other changes
	// of the same conversation MaxChangeAttempts times in a row.
	ErrContended = errors.New("conversation changed concurrently too often")
	// ErrIdempotencyKeyReused: an Idempotency-Key sent again with
	// another request.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with another request")
)

// Status is the state of a conversation.
type Status string

// The statuses of the contract.
const (
	StatusOpen    Status = "open"
	StatusSnoozed Status = "snoozed"
	StatusClosed  Status = "closed"
)

// Valid reports whether s is one of the contract's statuses.
func (s Status) Valid() bool {
	return s == StatusOpen || s == StatusSnoozed || s == StatusClosed
}

// Conversation belongs to one account; its participants are user ids of
// that account.
type Conversation struct {
	ID            string     `json:"id"`
	AccountID     string     `json:"-"`
	Subject       string     `json:"subject"`
	Status        Status     `json:"status"`
	Participants  []string   `json:"participants"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	LastMessageAt *time.Time `json:"lastMessageAt"`
	// Version counts the changes of the stored document: every change
	// is one compare-and-set on it, and the ETag is derived from it, so
	// no two states of one conversation share a version.
	Version int64 `json:"-"`
}

// Caller is who makes a request, as the verified bearer token says. It is
// the one place that decides which conversations a request may see and
// change (MayAccess, mirrored by the stores' query filter), whom a message
// it posts is by (Author), under which name its idempotency keys are kept
// (KeyOwner), and who takes part in a conversation it creates
// (NewConversation.Conversation).
//
// A caller is a user or a service client of the account. A user sees the
// conversations they take part in. A service client takes part in none and sees every conversation of its account; what it
// may do with them is limited by its token's scopes, which the HTTP layer
// checks per route before any of this runs.
type Caller struct {
	AccountID string
	// ID is the token's sub: the user id, or the client id of a service
	// client.
	ID string
	// Client is set for a service client's token.
	Client bool
}

// MayAccess reports whether the caller may see and change c: a
// conversation of the caller's account in which the caller takes part, or
// any conversation of its account for a service client. Stores express
// the same rule as a query filter.
func (who Caller) MayAccess(c Conversation) bool {
	return c.AccountID == who.AccountID && (who.Client || slices.Contains(c.Participants, who.ID))
}

// Author is the author recorded on a message the caller posts: the user
// id, or the client id.
func (who Caller) Author() string { return who.ID }

// KeyOwner is the name under which the caller's idempotency keys are kept
// within its account: the user id, or "client:" and the client id, so that
// a user and a service client never share keys even if their ids were
// equal.
func (who Caller) KeyOwner() string {
	if who.Client {
		return "client:" + who.ID
	}
	return who.ID
}

// Limits of conversations and messages.
const (
	MaxSubjectLen     = 300
	MaxParticipants   = 100
	MaxParticipantLen = 128
	DefaultPageSize   = 10
	MaxPageSize       = 100
	// MaxBodyLen is the request body limit of every route with a body.
	MaxBodyLen = 64 << 10
	// MaxConversationLen is the body limit of POST /v1/conversations.
	MaxConversationLen = MaxBodyLen
	// MaxChangeAttempts bounds the compare-and-set retries of one change
	// made without If-Match; each failed attempt means another change of
	// the same conversation succeeded.
	MaxChangeAttempts = 50
)

// Position is a point in a listing order (a time descending, then id
// descending; updatedAt for conversations, createdAt for messages): a page
// continues with the items strictly after it.
type Position struct {
	Time time.Time
	ID   string
}

// ListQuery selects a page of the conversations the caller may see.
type ListQuery struct {
	Caller Caller
	Status Status // "" means any status
	// UpdatedAfter, when set, keeps only conversations updated strictly
	// later (millisecond precision).
	UpdatedAfter *time.Time
	Limit        int       // 1..MaxPageSize
	After        *Position // nil means the first page
}

// Page is one page of a listing. Next is set when more conversations follow.
type Page struct {
	Conversations []Conversation
	Next          *Position
}

// Store is everything the service keeps. It persists and queries, and
// decides no rule: who may see what, what a change does, when to retry,
// how a crashed post is repaired and how a key expires are Service's.
// Every change of a conversation is one single-document conditional update
// (SaveConversation), never a transaction.
type Store interface {
	ConversationStore
	MessageStore
	IdempotencyStore
	EventStore
	PartitionStore
}

// ErrDuplicateID: an insert found a document with the same id already
// stored (an idempotent retry's pre-assigned id).
var ErrDuplicateID = errors.New("id already stored")

// ConversationQuery selects a page of one account's conversations, as the
// store reads it (Service.ListConversations builds it from a ListQuery).
type ConversationQuery struct {
	AccountID string
	// Participant keeps only the conversations this user takes part in;
	// "" keeps every conversation of the account.
	Participant  string
	Status       Status // "" means any status
	UpdatedAfter *time.Time
	Limit        int
	After        *Position
}

// Change is one change of a conversation: the state it was read in and the
// state to store. The store writes To only while the stored document is
// still at From.Version (one single-document conditional update), so a
// change is stored whole or not at all; whatever must be recorded with a
// change belongs in that same update: its Events, recorded pending on the
// conversation for the Relay to copy into the account's log.
type Change struct {
	From   Conversation
	To     Conversation
	Events []Event
}

// ConversationStore persists conversations.
type ConversationStore interface {
	// InsertConversation stores c as it is (every field set) with
	// events pending on it, in one insert; ErrDuplicateID when a
	// conversation with c.ID is stored already (and nothing is recorded).
	InsertConversation(ctx context.Context, c Conversation, events ...Event) error
	// FindConversation returns the conversation id of accountID;
	// ErrNotFound when there is none.
	FindConversation(ctx context.Context, accountID, id string) (Conversation, error)
	// ListConversations returns one page in the order updatedAt
	// descending, then id descending, strictly after q.After.
	ListConversations(ctx context.Context, q ConversationQuery) (Page, error)
	// SaveConversation stores ch.To, and records ch.Events pending on
	// it, if the stored conversation is still at ch.From.Version (one
	// update), and reports whether it was.
	SaveConversation(ctx context.Context, ch Change) (bool, error)
}

// Message is immutable once posted.
type Message struct {
	ID             string          `json:"id"`
	AccountID      string          `json:"-"`
	ConversationID string          `json:"conversationId"`
	Author         string          `json:"author"`
	Body           string          `json:"body"`
	Metadata       json.RawMessage `json:"metadata"` // a compact JSON object
	CreatedAt      time.Time       `json:"createdAt"`
}

// Limits of messages.
const (
	MaxMessageBodyLen = 10000    // characters
	MaxMetadataLen    = 16 << 10 // bytes of compact JSON
)

// MessageQuery selects a page of the messages of one conversation, newest
// first (createdAt descending, then id descending).
type MessageQuery struct {
	Caller         Caller
	ConversationID string
	Limit          int       // 1..MaxPageSize
	After          *Position // nil means the first page
}

// MessagePage is one page of messages. Next is set when more follow.
type MessagePage struct {
	Messages []Message
	Next     *Position
}

// MessageRange selects a page of the messages of one conversation, as
// the store reads it.
type MessageRange struct {
	AccountID      string
	ConversationID string
	Limit          int
	After          *Position
}

// MessageStore persists messages. Posting is two single-document writes,
// in the order Service.PostMessage gives (see there).
type MessageStore interface {
	// InsertMessage stores m as it is (every field set) with events
	// pending on it, in one insert; ErrDuplicateID when a message with
	// m.ID is stored already (and nothing is recorded).
	InsertMessage(ctx context.Context, m Message, events ...Event) error
	// FindMessage returns one message of a conversation of accountID;
	// ErrMessageNotFound when there is none.
	FindMessage(ctx context.Context, accountID, conversationID, messageID string) (Message, error)
	// ListMessages returns one page, newest first (createdAt descending,
	// then id descending), strictly after r.After.
	ListMessages(ctx context.Context, r MessageRange) (MessagePage, error)
}

// NewMessage is the body of POST /v1/conversations/{id}/messages.
type NewMessage struct {
	Body     string          `json:"body"`
	Metadata json.RawMessage `json:"metadata"`
}

// Message validates the input and returns the message the caller posts to
// conversationID: body 1..MaxMessageBodyLen characters, metadata a JSON
// object of at most MaxMetadataLen bytes once compacted, nesting at most
// validation.MaxJSONDepth levels ({} when absent or null). The error is
// a *validation.Error listing every offending field.
func (in NewMessage) Message(who Caller, conversationID string) (Message, error) {
	var invalid validation.Collector
	if n := utf8.RuneCountInString(in.Body); n < 1 || n > MaxMessageBodyLen {
		invalid.Add("body", fmt.Sprintf("must be 1 to %d characters", MaxMessageBodyLen))
	}
	metadata := json.RawMessage(`{}`)
	if raw := bytes.TrimSpace(in.Metadata); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		var compact bytes.Buffer
		switch {
		case raw[0] != '{':
			invalid.Add("metadata", "must be a JSON object")
		case json.Compact(&compact, raw) != nil:
			invalid.Add("metadata", "must be a JSON object")
		case compact.Len() > MaxMetadataLen:
			invalid.Add("metadata", fmt.Sprintf("must be at most %d bytes of JSON", MaxMetadataLen))
		case validation.JSONDepth(compact.Bytes()) > validation.MaxJSONDepth:
			invalid.Add("metadata", fmt.Sprintf("must nest objects and arrays at most %d levels deep", validation.MaxJSONDepth))
		default:
			metadata = compact.Bytes()
		}
	}
	if err := invalid.Err(); err != nil {
		return Message{}, err
	}
	return Message{
		AccountID: who.AccountID, ConversationID: conversationID, Author: who.Author(),
		Body: in.Body, Metadata: metadata,
	}, nil
}

// Precondition is a parsed If-Match: the versions the caller expects.
// The zero value (no If-Match) matches every version.
type Precondition struct {
	Given    bool    // an If-Match header was sent
	Any      bool    // If-Match: *
	Versions []int64 // the versions of the tags that name one
}

// Matches reports whether a conversation at version v satisfies p.
func (p Precondition) Matches(v int64) bool {
	if !p.Given || p.Any {
		return true
	}
	for _, w := range p.Versions {
		if w == v {
			return true
		}
	}
	return false
}

// ErrMessageNotFound: no such message in a conversation of the caller's.
var ErrMessageNotFound = fmt.Errorf("message %w", ErrNotFound)

// NewConversationID and NewMessageID return fresh ids: a prefix and 96
// random bits. Ids appear in URLs, so they must not be guessable; listing
// orders never depend on them beyond breaking ties of equal times.
func NewConversationID() string { return newID("cnv_") }

// NewMessageID: see NewConversationID.
func NewMessageID() string { return newID("msg_") }

func newID(prefix string) string { return validation.NewRandomID(prefix) }

// The rules below change a conversation in memory; stores write the
// result with one compare-and-set on the version they read.

// nextUpdatedAt is the updatedAt of a change made at now: later than the
// previous one by at least a millisecond (the stored precision), so every
// change moves updatedAt forward, even within one millisecond or when the
// clock of this replica is behind the one that made the previous change.
func (c Conversation) nextUpdatedAt(now time.Time) time.Time {
	return later(now.UTC().Truncate(time.Millisecond), c.UpdatedAt.Add(time.Millisecond))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Apply changes c as p says at now and reports whether anything changed;
// a patch that sets the values c already has changes nothing.
func (p Patch) Apply(c *Conversation, now time.Time) bool {
	changed := false
	if p.Subject != nil && *p.Subject != c.Subject {
		c.Subject, changed = *p.Subject, true
	}
	if p.Status != nil && *p.Status != c.Status {
		c.Status, changed = *p.Status, true
	}
	if changed {
		c.UpdatedAt = c.nextUpdatedAt(now)
	}
	return changed
}

// AddParticipant adds userID to c at now; false when already there,
// ErrTooManyParticipants when c is full.
func (c *Conversation) AddParticipant(userID string, now time.Time) (bool, error) {
	if slices.Contains(c.Participants, userID) {
		return false, nil
	}
	if len(c.Participants) >= MaxParticipants {
		return false, ErrTooManyParticipants
	}
	c.Participants = append(slices.Clip(c.Participants), userID)
	c.UpdatedAt = c.nextUpdatedAt(now)
	return true, nil
}

// RemoveParticipant removes userID from c at now; false when not there,
// ErrLastParticipant when userID is the only one.
func (c *Conversation) RemoveParticipant(userID string, now time.Time) (bool, error) {
	i := slices.Index(c.Participants, userID)
	if i < 0 {
		return false, nil
	}
	if len(c.Participants) == 1 {
		return false, ErrLastParticipant
	}
	c.Participants = slices.Delete(slices.Clone(c.Participants), i, i+1)
	c.UpdatedAt = c.nextUpdatedAt(now)
	return true, nil
}

// MessageTime is the createdAt of a message posted now to c: now, or just
// after c's updatedAt when that is not earlier, so that the message moves
// updatedAt forward and becomes the conversation's newest activity.
func (c Conversation) MessageTime(now time.Time) time.Time {
	return c.nextUpdatedAt(now)
}

// RecordMessage applies a stored message created at to c and reports
// whether c changed. A message is new to c when it is later than c's
// lastMessageAt or than its updatedAt; then lastMessageAt moves to it
// (never backwards), updatedAt moves forward to it (at least a millisecond
// past the previous change), and a snoozed conversation reopens, unless it
// changed after the message was made (a snooze that came later stays). It
// is how a post completes and how a read repairs a post that stopped after
// storing its message: applying it twice changes nothing the second time.
func (c *Conversation) RecordMessage(at time.Time) bool {
	newest := c.LastMessageAt == nil || at.After(*c.LastMessageAt)
	if !newest && !at.After(c.UpdatedAt) {
		return false
	}
	if c.Status == StatusSnoozed && at.After(c.UpdatedAt) {
		c.Status = StatusOpen
	}
	if newest {
		t := at
		c.LastMessageAt = &t
	}
	c.UpdatedAt = later(at, c.UpdatedAt.Add(time.Millisecond))
	return true
}

// eventsOfChange are the events a change of a conversation records
// (besides message.created, which the message records): a changed subject
// or status is conversation.updated with the previous values, each added
// or removed participant its own event. Moving lastMessageAt or updatedAt
// alone records nothing.
func eventsOfChange(from, to Conversation) []Event {
	var events []Event
	add := func(t EventType, audience []string, data EventData) {
		data.Conversation = to
		events = append(events, Event{
			ID: NewEventID(), AccountID: to.AccountID, Type: t, Timestamp: to.UpdatedAt,
			ConversationID: to.ID, Audience: audience, Data: data,
		})
	}
	changes := map[string]any{}
	if from.Subject != to.Subject {
		changes["subject"] = from.Subject
	}
	if from.Status != to.Status {
		changes["status"] = from.Status
	}
	if len(changes) > 0 {
		add(EventConversationUpdated, to.Participants, EventData{Changes: changes})
	}
	for _, u := range to.Participants {
		if !slices.Contains(from.Participants, u) {
			add(EventParticipantAdded, to.Participants, EventData{UserID: u})
		}
	}
	for _, u := range from.Participants {
		if !slices.Contains(to.Participants, u) {
			add(EventParticipantRemoved, append(slices.Clone(to.Participants), u), EventData{UserID: u})
		}
	}
	return events
}

// createdEvent is the event of a conversation's creation.
func createdEvent(c Conversation) Event {
	return Event{
		ID: NewEventID(), AccountID: c.AccountID, Type: EventConversationCreated, Timestamp: c.CreatedAt,
		ConversationID: c.ID, Audience: c.Participants, Data: EventData{Conversation: c},
	}
}

// messageEvent is the event of a message posted to conv (the conversation
// as the post reads it; its data shows it as the post records it).
func messageEvent(conv Conversation, m Message) Event {
	after := conv
	if after.RecordMessage(m.CreatedAt) {
		after.Version++
	}
	msg := m
	return Event{
		ID: NewEventID(), AccountID: m.AccountID, Type: EventMessageCreated, Timestamp: m.CreatedAt,
		ConversationID: conv.ID, Audience: conv.Participants, Data: EventData{Conversation: after, Message: &msg},
	}
}
