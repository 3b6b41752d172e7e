package conversations

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/acme/platform/pkg/validation"
)

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
