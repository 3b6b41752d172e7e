package mongostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/conversations"
)

type messageDoc struct {
	ID             string    `bson:"_id"`
	AccountID      string    `bson:"account_id"`
	ConversationID string    `bson:"conversation_id"`
	Author         string    `bson:"author"`
	Body           string    `bson:"body"`
	Metadata       string    `bson:"metadata"` // JSON text: round-trips keys with $ or . and big numbers exactly
	CreatedAt      time.Time `bson:"created_at"`
}

// PostMessage implements conversations.MessageStore. The order of its
// writes, and what each crash leaves:
//
//  1. read the conversation (access, closed, its updatedAt);
//  2. insert the message, created at Conversation.MessageTime: the commit
//     point. A crash before it leaves nothing;
//  3. record it in the conversation (Conversation.RecordMessage, one
//     compare-and-set). A crash between 2 and 3 leaves a message that is
//     listed but whose conversation still shows the previous lastMessageAt,
//     updatedAt and (snoozed) status. The next post records it implicitly
//     (its own message is later), and every GetMessage and ListMessages
//     records the newest message it returns when the conversation has not:
//     the first page of messages, the first thing a reader asks for, starts
//     with the newest message. A retry with the same Idempotency-Key reuses
//     the message's id, finds it stored, and does step 3 itself.
func (s *Store) PostMessage(ctx context.Context, who conversations.Caller, m conversations.Message) (conversations.Message, error) {
	conv, err := s.GetConversation(ctx, who, m.ConversationID)
	if err != nil {
		return conversations.Message{}, err
	}
	if conv.Status == conversations.StatusClosed {
		return conversations.Message{}, fmt.Errorf("conversation %q: %w", conv.ID, conversations.ErrConversationClosed)
	}
	m.AccountID, m.Author, m.CreatedAt = who.AccountID, who.Author(), conv.MessageTime(s.now())
	if m.ID == "" {
		m.ID = conversations.NewMessageID()
	}
	stored, err := s.InsertMessage(ctx, m)
	if err != nil {
		return conversations.Message{}, err
	}
	if err := s.recordMessage(ctx, who, &conv, stored.CreatedAt); err != nil {
		return conversations.Message{}, err
	}
	return stored, nil
}

// InsertMessage implements conversations.MessageStore: step 2 of
// PostMessage alone. A message with m.ID already stored in the same
// conversation (an idempotent retry) is returned instead of a second one.
func (s *Store) InsertMessage(ctx context.Context, m conversations.Message) (conversations.Message, error) {
	if m.ID == "" {
		m.ID = conversations.NewMessageID()
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = s.now()
	}
	m.CreatedAt = m.CreatedAt.UTC().Truncate(time.Millisecond)
	if len(m.Metadata) == 0 {
		m.Metadata = json.RawMessage(`{}`)
	}
	_, err := s.messages.InsertOne(ctx, messageDoc{
		ID: m.ID, AccountID: m.AccountID, ConversationID: m.ConversationID, Author: m.Author,
		Body: m.Body, Metadata: string(m.Metadata), CreatedAt: m.CreatedAt,
	})
	if mongo.IsDuplicateKeyError(err) {
		return s.findMessage(ctx, m.AccountID, m.ConversationID, m.ID)
	}
	if err != nil {
		return conversations.Message{}, mongoconn.Wrap(err, "insert message")
	}
	return m, nil
}

// GetMessage implements conversations.MessageStore.
func (s *Store) GetMessage(ctx context.Context, who conversations.Caller, conversationID, messageID string) (conversations.Message, error) {
	conv, err := s.GetConversation(ctx, who, conversationID)
	if err != nil {
		return conversations.Message{}, err
	}
	m, err := s.findMessage(ctx, who.AccountID, conversationID, messageID)
	if err != nil {
		return conversations.Message{}, err
	}
	if err := s.repair(ctx, who, &conv, m.CreatedAt); err != nil {
		return conversations.Message{}, err
	}
	return m, nil
}

func (s *Store) findMessage(ctx context.Context, accountID, conversationID, messageID string) (conversations.Message, error) {
	var d messageDoc
	err := s.messages.FindOne(ctx, bson.D{
		{Key: "_id", Value: messageID},
		{Key: "account_id", Value: accountID},
		{Key: "conversation_id", Value: conversationID},
	}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return conversations.Message{}, fmt.Errorf("%q: %w", messageID, conversations.ErrMessageNotFound)
	}
	if err != nil {
		return conversations.Message{}, mongoconn.Wrap(err, "get message")
	}
	return d.domain(), nil
}

// ListMessages implements conversations.MessageStore: newest first, then
// id descending, starting strictly after q.After.
func (s *Store) ListMessages(ctx context.Context, q conversations.MessageQuery) (conversations.MessagePage, error) {
	conv, err := s.GetConversation(ctx, q.Caller, q.ConversationID)
	if err != nil {
		return conversations.MessagePage{}, err
	}
	filter := bson.D{
		{Key: "account_id", Value: q.Caller.AccountID},
		{Key: "conversation_id", Value: q.ConversationID},
	}
	items, next, err := findPage(ctx, s.messages, filter, "created_at", "by_conversation", q.After, q.Limit,
		messageDoc.domain, func(m conversations.Message) conversations.Position {
			return conversations.Position{Time: m.CreatedAt, ID: m.ID}
		})
	if err != nil {
		return conversations.MessagePage{}, mongoconn.Wrap(err, "list messages")
	}
	page := conversations.MessagePage{Messages: items, Next: next}
	if len(page.Messages) > 0 {
		// The newest message of the page is its first.
		if err := s.repair(ctx, q.Caller, &conv, page.Messages[0].CreatedAt); err != nil {
			return conversations.MessagePage{}, err
		}
	}
	return page, nil
}

// repair records a message created at that a read returned, when conv (as
// read) has not recorded it: the trace of a post that stopped between its
// two writes. Usually conv has, and repair writes nothing.
func (s *Store) repair(ctx context.Context, who conversations.Caller, conv *conversations.Conversation, at time.Time) error {
	if probe := *conv; !probe.RecordMessage(at) {
		return nil
	}
	return s.recordMessage(ctx, who, conv, at)
}

// recordMessage is step 3 of PostMessage, starting from conv as read.
func (s *Store) recordMessage(ctx context.Context, who conversations.Caller, conv *conversations.Conversation, at time.Time) error {
	_, err := s.change(ctx, who, conv.ID, conversations.Precondition{}, conv,
		func(c *conversations.Conversation, _ time.Time) (bool, error) { return c.RecordMessage(at), nil })
	if err != nil {
		return fmt.Errorf("record message: %w", err)
	}
	return nil
}

func (d messageDoc) domain() conversations.Message {
	return conversations.Message{
		ID: d.ID, AccountID: d.AccountID, ConversationID: d.ConversationID, Author: d.Author,
		Body: d.Body, Metadata: json.RawMessage(d.Metadata), CreatedAt: d.CreatedAt.UTC(),
	}
}
