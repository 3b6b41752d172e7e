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
	// The message.created event until the relay copies it (see events.go).
	PendingEvents []pendingEventDoc `bson:"pending_events,omitempty"`
	PendingSince  *time.Time        `bson:"pending_since,omitempty"`
	PendingSlot   *int              `bson:"pending_slot,omitempty"`
}

// InsertMessage implements conversations.MessageStore.
func (s *Store) InsertMessage(ctx context.Context, m conversations.Message, events ...conversations.Event) error {
	d, err := NewMessageDocument(m, traced(ctx, events)...)
	if err != nil {
		return err
	}
	_, err = s.messages.InsertOne(ctx, d)
	if mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("message %q: %w", m.ID, conversations.ErrDuplicateID)
	}
	return mongoconn.Wrap(err, "insert message")
}

// FindMessage implements conversations.MessageStore.
func (s *Store) FindMessage(ctx context.Context, accountID, conversationID, messageID string) (conversations.Message, error) {
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

// ListMessages implements conversations.MessageStore.
func (s *Store) ListMessages(ctx context.Context, r conversations.MessageRange) (conversations.MessagePage, error) {
	filter := bson.D{
		{Key: "account_id", Value: r.AccountID},
		{Key: "conversation_id", Value: r.ConversationID},
	}
	items, next, err := findPage(ctx, s.messages, filter, "created_at", "by_conversation", r.After, r.Limit,
		messageDoc.domain, func(m conversations.Message) conversations.Position {
			return conversations.Position{Time: m.CreatedAt, ID: m.ID}
		})
	if err != nil {
		return conversations.MessagePage{}, mongoconn.Wrap(err, "list messages")
	}
	return conversations.MessagePage{Messages: items, Next: next}, nil
}

func toMessageDoc(m conversations.Message) messageDoc {
	metadata := string(m.Metadata)
	if metadata == "" {
		metadata = "{}"
	}
	return messageDoc{
		ID: m.ID, AccountID: m.AccountID, ConversationID: m.ConversationID, Author: m.Author,
		Body: m.Body, Metadata: metadata, CreatedAt: m.CreatedAt.UTC().Truncate(time.Millisecond),
	}
}

func (d messageDoc) domain() conversations.Message {
	return conversations.Message{
		ID: d.ID, AccountID: d.AccountID, ConversationID: d.ConversationID, Author: d.Author,
		Body: d.Body, Metadata: json.RawMessage(d.Metadata), CreatedAt: d.CreatedAt.UTC(),
	}
}
