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

// Limits of messages (contract section 8).
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

// MessageStore persists messages.
//
// Posting is two single-document writes, in this order: the message is
// inserted (the commit point: from then on the message exists and is
// listed), then the conversation records it (Conversation.RecordMessage,
// one compare-and-set). A post that stops between the two leaves a message
// its conversation has not recorded yet; every read of messages, and the
// next post, records it, so nothing is lost and lastMessageAt catches up.
type MessageStore interface {
	// PostMessage posts m (Body and Metadata set; a given ID, an
	// idempotent retry's pre-assigned one, is kept) to the conversation
	// m.ConversationID as who: ErrNotFound when who may not access it,
	// ErrConversationClosed when it is closed. When a message with m.ID
	// is already stored in that conversation, it is returned and
	// recorded instead of a second one.
	PostMessage(ctx context.Context, who Caller, m Message) (Message, error)
	// InsertMessage is the first write of PostMessage alone: it stores m
	// (every field set) and does not touch the conversation, exactly
	// what a post that stopped after its first write leaves behind.
	InsertMessage(ctx context.Context, m Message) (Message, error)
	// GetMessage and ListMessages read the messages of a conversation who
	// may access (ErrNotFound otherwise) and record in it any message
	// they return that it has not recorded yet.
	GetMessage(ctx context.Context, who Caller, conversationID, messageID string) (Message, error)
	ListMessages(ctx context.Context, q MessageQuery) (MessagePage, error)
}
