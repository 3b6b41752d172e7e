package conversations

import (
	"context"
	"encoding/json"
	"time"
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
