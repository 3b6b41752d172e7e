// Package mongostore implements the conversations store on MongoDB
// (go.mongodb.org/mongo-driver/v2). EnsureIndexes creates, idempotently at
// start, the indexes that serve every query; the README's "Indexes and
// paging" lists them with the query each serves. Every query carries
// account_id, paging is keyset, and no write spans two documents: a change
// is one compare-and-set on the conversation's version, a post two writes
// in a fixed order. The store decides no rule: conversations.Service does.
package mongostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook"
)

// Store implements conversations.Store.
type Store struct {
	conversations *mongo.Collection
	messages      *mongo.Collection
	idempotency   *mongo.Collection
	settings      *mongo.Collection
	events        *mongo.Collection
	eventFloors   *mongo.Collection
	leases        *mongo.Collection
	webhooks      *mongo.Collection
	deliveries    *mongo.Collection
	quotas        *mongo.Collection
}

var (
	_ conversations.Store = (*Store)(nil)
	_ webhook.Store       = (*Store)(nil)
)

var majority = options.Collection().SetWriteConcern(writeconcern.Majority()).SetReadConcern(readconcern.Majority())

// New returns a Store on db. Call EnsureIndexes once at start.
func New(db *mongo.Database) *Store {
	return &Store{
		conversations: db.Collection("conversations"),
		messages:      db.Collection("messages"),
		idempotency:   db.Collection("idempotency_keys"),
		settings:      db.Collection("settings"),
		// The log is written and read with majority concern on a replica
		// set: an event a consumer saw never rolls back, and a relay never
		// reads a newest sequence that a failover takes away.
		events:      db.Collection("events", majority),
		eventFloors: db.Collection("event_floors", majority),
		leases:      db.Collection("leases"),
		webhooks:    db.Collection("webhooks"),
		deliveries:  db.Collection("webhook_deliveries"),
		quotas:      db.Collection("webhook_quotas"),
	}
}

// EnsureIndexes creates the indexes of the package doc; a no-op when they
// exist, so every replica may call it at every start.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	indexes := []struct {
		coll  *mongo.Collection
		model mongo.IndexModel
	}{
		{s.conversations, mongo.IndexModel{
			Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "participants", Value: 1},
				{Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}},
			Options: options.Index().SetName("by_participant"),
		}},
		{s.conversations, mongo.IndexModel{
			Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "participants", Value: 1}, {Key: "status", Value: 1},
				{Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}},
			Options: options.Index().SetName("by_participant_status"),
		}},
		{s.conversations, mongo.IndexModel{
			Keys:    bson.D{{Key: "account_id", Value: 1}, {Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}},
			Options: options.Index().SetName("by_account"),
		}},
		{s.conversations, mongo.IndexModel{
			Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "status", Value: 1},
				{Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}},
			Options: options.Index().SetName("by_account_status"),
		}},
		{s.messages, mongo.IndexModel{
			Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "conversation_id", Value: 1},
				{Key: "created_at", Value: -1}, {Key: "_id", Value: -1}},
			Options: options.Index().SetName("by_conversation"),
		}},
		{s.idempotency, mongo.IndexModel{
			Keys:    bson.D{{Key: "account_id", Value: 1}, {Key: "caller", Value: 1}, {Key: "key", Value: 1}},
			Options: options.Index().SetName("by_key").SetUnique(true),
		}},
		{s.idempotency, mongo.IndexModel{
			Keys:    bson.D{{Key: "created_at", Value: 1}},
			Options: options.Index().SetName("by_created_at"),
		}},
		{s.conversations, mongo.IndexModel{
			Keys:    bson.D{{Key: "pending_slot", Value: 1}, {Key: "pending_since", Value: 1}},
			Options: options.Index().SetName("by_pending_slot"),
		}},
		{s.messages, mongo.IndexModel{
			Keys:    bson.D{{Key: "pending_slot", Value: 1}, {Key: "pending_since", Value: 1}},
			Options: options.Index().SetName("by_pending_slot"),
		}},
		{s.events, mongo.IndexModel{
			Keys:    bson.D{{Key: "account_id", Value: 1}, {Key: "sequence", Value: 1}},
			Options: options.Index().SetName("by_sequence").SetUnique(true),
		}},
		{s.events, mongo.IndexModel{
			Keys:    bson.D{{Key: "account_id", Value: 1}, {Key: "type", Value: 1}, {Key: "sequence", Value: 1}},
			Options: options.Index().SetName("by_type"),
		}},
		{s.events, mongo.IndexModel{
			Keys:    bson.D{{Key: "account_id", Value: 1}, {Key: "audience", Value: 1}, {Key: "sequence", Value: 1}},
			Options: options.Index().SetName("by_audience"),
		}},
		{s.events, mongo.IndexModel{
			Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "audience", Value: 1}, {Key: "type", Value: 1},
				{Key: "sequence", Value: 1}},
			Options: options.Index().SetName("by_audience_type"),
		}},
		{s.events, mongo.IndexModel{
			Keys:    bson.D{{Key: "timestamp", Value: 1}},
			Options: options.Index().SetName("by_timestamp"),
		}},
	}
	indexes = append(indexes, s.webhookIndexes()...)
	// One at a time: the embedded server drops the connection when
	// createIndexes with several indexes meets existing ones.
	for _, ix := range indexes {
		if _, err := ix.coll.Indexes().CreateOne(ctx, ix.model); err != nil {
			return mongoconn.Wrap(err, "create indexes of "+ix.coll.Name())
		}
	}
	return nil
}

// LoadOrCreateSecret returns the named secret, generating and storing it on
// first use, so that every replica shares it (the cursor MAC key).
func (s *Store) LoadOrCreateSecret(ctx context.Context, name string, generate func() (string, error)) (string, error) {
	return mongoconn.LoadOrCreate(ctx, s.settings, name, generate)
}

type conversationDoc struct {
	ID            string     `bson:"_id"`
	AccountID     string     `bson:"account_id"`
	Subject       string     `bson:"subject"`
	Status        string     `bson:"status"`
	Participants  []string   `bson:"participants"`
	CreatedAt     time.Time  `bson:"created_at"`
	UpdatedAt     time.Time  `bson:"updated_at"`
	LastMessageAt *time.Time `bson:"last_message_at"`
	// Version is absent (0) in documents written before versions existed.
	Version int64 `bson:"version"`
	// PendingEvents are the events of its changes the relay has not
	// copied into the log yet; PendingSince is the time of the oldest
	// (absent when none).
	PendingEvents []pendingEventDoc `bson:"pending_events,omitempty"`
	PendingSince  *time.Time        `bson:"pending_since,omitempty"`
	PendingSlot   *int              `bson:"pending_slot,omitempty"`
}

// listFilter and listIndex are a ConversationQuery as a filter and the
// index that serves it (see the package doc): the conversations of one
// account, of one participant unless the query keeps every one (a service
// client's listing), with or without a status.
func listFilter(q conversations.ConversationQuery) (bson.D, string) {
	filter := bson.D{{Key: "account_id", Value: q.AccountID}}
	hint := "by_account"
	if q.Participant != "" {
		filter = append(filter, bson.E{Key: "participants", Value: q.Participant})
		hint = "by_participant"
	}
	if q.Status != "" {
		filter = append(filter, bson.E{Key: "status", Value: string(q.Status)})
		hint += "_status"
	}
	if q.UpdatedAfter != nil {
		// The same index: updated_at follows the equality fields.
		filter = append(filter, bson.E{Key: "updated_at", Value: bson.D{{Key: "$gt", Value: q.UpdatedAfter.UTC()}}})
	}
	return filter, hint
}

// InsertConversation implements conversations.ConversationStore.
func (s *Store) InsertConversation(ctx context.Context, c conversations.Conversation, events ...conversations.Event) error {
	d := toDoc(c)
	var err error
	if d.PendingEvents, d.PendingSince, err = pendingDocs(traced(ctx, events)); err != nil {
		return err
	}
	d.PendingSlot = pendingSlot(c.AccountID, d.PendingEvents)
	_, err = s.conversations.InsertOne(ctx, d)
	if mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("conversation %q: %w", c.ID, conversations.ErrDuplicateID)
	}
	return mongoconn.Wrap(err, "insert conversation")
}

// FindConversation implements conversations.ConversationStore.
func (s *Store) FindConversation(ctx context.Context, accountID, id string) (conversations.Conversation, error) {
	var d conversationDoc
	err := s.conversations.FindOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "account_id", Value: accountID}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return conversations.Conversation{}, fmt.Errorf("conversation %q: %w", id, conversations.ErrNotFound)
	}
	if err != nil {
		return conversations.Conversation{}, mongoconn.Wrap(err, "get conversation")
	}
	return d.domain(), nil
}

// ListConversations implements conversations.ConversationStore.
func (s *Store) ListConversations(ctx context.Context, q conversations.ConversationQuery) (conversations.Page, error) {
	filter, hint := listFilter(q)
	items, next, err := findPage(ctx, s.conversations, filter, "updated_at", hint, q.After, q.Limit,
		conversationDoc.domain, func(c conversations.Conversation) conversations.Position {
			return conversations.Position{Time: c.UpdatedAt, ID: c.ID}
		})
	if err != nil {
		return conversations.Page{}, mongoconn.Wrap(err, "list conversations")
	}
	return conversations.Page{Conversations: items, Next: next}, nil
}

// findAll returns the documents of a find as their domain values.
func findAll[D, T any](ctx context.Context, coll *mongo.Collection, filter bson.D, opts *options.FindOptionsBuilder, domain func(D) T) ([]T, error) {
	cur, err := coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, err
	}
	var docs []D
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make([]T, len(docs))
	for i, d := range docs {
		out[i] = domain(d)
	}
	return out, nil
}

// findPage runs one keyset-paged find of a listing: sorted by field
// descending, then _id descending, strictly after the position after, and
// one more than limit, which tells whether another page follows (next, the
// position of the page's last item).
func findPage[D, T any](ctx context.Context, coll *mongo.Collection, filter bson.D, field, hint string,
	after *conversations.Position, limit int, domain func(D) T, position func(T) conversations.Position,
) (items []T, next *conversations.Position, err error) {
	if after != nil {
		filter = append(filter, keysetAfter(field, *after))
	}
	opts := options.Find().
		SetSort(bson.D{{Key: field, Value: -1}, {Key: "_id", Value: -1}}).
		SetLimit(int64(limit) + 1).
		SetHint(hint)
	cur, err := coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, nil, err
	}
	var docs []D
	if err := cur.All(ctx, &docs); err != nil {
		return nil, nil, err
	}
	items = make([]T, 0, min(len(docs), limit))
	for i, d := range docs {
		if i == limit {
			pos := position(items[limit-1])
			return items, &pos, nil
		}
		items = append(items, domain(d))
	}
	return items, nil, nil
}

// keysetAfter is the condition "strictly after pos" of a listing ordered
// by (field, _id) descending.
func keysetAfter(field string, pos conversations.Position) bson.E {
	return bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: field, Value: bson.D{{Key: "$lt", Value: pos.Time}}}},
		bson.D{{Key: field, Value: pos.Time}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: pos.ID}}}},
	}}
}

// SaveConversation implements conversations.ConversationStore: one
// conditional single-document update on {_id, account_id, version}.
func (s *Store) SaveConversation(ctx context.Context, ch conversations.Change) (bool, error) {
	filter := bson.D{{Key: "_id", Value: ch.From.ID}, {Key: "account_id", Value: ch.From.AccountID}}
	if ch.From.Version == 0 {
		// Written before versions existed: no version field yet.
		filter = append(filter, bson.E{Key: "version", Value: bson.D{{Key: "$exists", Value: false}}})
	} else {
		filter = append(filter, bson.E{Key: "version", Value: ch.From.Version})
	}
	d := toDoc(ch.To)
	set := bson.D{
		{Key: "subject", Value: d.Subject},
		{Key: "status", Value: d.Status},
		{Key: "participants", Value: d.Participants},
		{Key: "updated_at", Value: d.UpdatedAt},
		{Key: "last_message_at", Value: d.LastMessageAt},
		{Key: "version", Value: d.Version},
	}
	pending, since, err := pendingDocs(traced(ctx, ch.Events))
	if err != nil {
		return false, err
	}
	var update bson.D
	if len(pending) > 0 {
		// Recorded by the same update: stored with the change or not at
		// all. The slot also goes on a document pending from before slots
		// existed.
		update = bson.D{
			{Key: "$set", Value: append(set, bson.E{Key: "pending_slot", Value: conversations.PendingSlot(ch.From.AccountID)})},
			{Key: "$push", Value: bson.D{{Key: "pending_events", Value: bson.D{{Key: "$each", Value: pending}}}}},
			{Key: "$min", Value: bson.D{{Key: "pending_since", Value: *since}}},
		}
	} else {
		update = bson.D{{Key: "$set", Value: set}}
	}
	res, err := s.conversations.UpdateOne(ctx, filter, update)
	if err != nil {
		return false, mongoconn.Wrap(err, "update conversation")
	}
	return res.MatchedCount == 1, nil
}

func toDoc(c conversations.Conversation) conversationDoc {
	return conversationDoc{
		ID: c.ID, AccountID: c.AccountID, Subject: c.Subject, Status: string(c.Status),
		Participants: c.Participants, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt, LastMessageAt: c.LastMessageAt,
		Version: c.Version,
	}
}

func (d conversationDoc) domain() conversations.Conversation {
	c := conversations.Conversation{
		ID: d.ID, AccountID: d.AccountID, Subject: d.Subject, Status: conversations.Status(d.Status),
		Participants: d.Participants, CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(),
		Version: d.Version,
	}
	if d.LastMessageAt != nil {
		t := d.LastMessageAt.UTC()
		c.LastMessageAt = &t
	}
	return c
}

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
	d, err := newMessageDoc(m, traced(ctx, events))
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

// newMessageDoc is the document InsertMessage stores for m, with events
// pending on it.
func newMessageDoc(m conversations.Message, events []conversations.Event) (messageDoc, error) {
	d := toMessageDoc(m)
	var err error
	if d.PendingEvents, d.PendingSince, err = pendingDocs(events); err != nil {
		return messageDoc{}, err
	}
	d.PendingSlot = pendingSlot(m.AccountID, d.PendingEvents)
	return d, nil
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

type idempotencyDoc struct {
	ID          bson.ObjectID `bson:"_id"` // generated by the upsert
	AccountID   string        `bson:"account_id"`
	Caller      string        `bson:"caller"`
	Key         string        `bson:"key"`
	Fingerprint string        `bson:"fingerprint"`
	ResourceID  string        `bson:"resource_id"`
	CreatedAt   time.Time     `bson:"created_at"`
	Created     *createdDoc   `bson:"created"`
}

// createdDoc is what the first request with a key created, in the
// document of its own collection. (Records from before it, which kept an
// HTTP response under "response", have none: a retry of theirs finds
// the resource under the reserved id, as a retry of a first request that
// stopped before saving does.)
type createdDoc struct {
	Conversation *conversationDoc `bson:"conversation,omitempty"`
	Message      *messageDoc      `bson:"message,omitempty"`
}

func keyFilter(k conversations.IdempotencyKey) bson.D {
	return bson.D{{Key: "account_id", Value: k.AccountID}, {Key: "caller", Value: k.Caller}, {Key: "key", Value: k.Key}}
}

// ClaimIdempotencyKey implements conversations.IdempotencyStore with one
// upsert on the unique by_key index: of concurrent claims one inserts, and
// the others (which read it, or lose the insert with a duplicate key error
// and read it on their next round) get the same record.
func (s *Store) ClaimIdempotencyKey(ctx context.Context, rec conversations.IdempotencyRecord) (conversations.IdempotencyRecord, error) {
	for range 5 {
		var d idempotencyDoc
		err := s.idempotency.FindOneAndUpdate(ctx, keyFilter(rec.IdempotencyKey),
			bson.D{{Key: "$setOnInsert", Value: bson.D{
				{Key: "fingerprint", Value: rec.Fingerprint},
				{Key: "resource_id", Value: rec.ResourceID},
				{Key: "created_at", Value: rec.CreatedAt.UTC()},
				{Key: "created", Value: nil},
			}}},
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After),
		).Decode(&d)
		if mongo.IsDuplicateKeyError(err) {
			continue // a concurrent claim inserted it: read it next round
		}
		if err != nil {
			return conversations.IdempotencyRecord{}, mongoconn.Wrap(err, "claim idempotency key")
		}
		return d.domain(), nil
	}
	return conversations.IdempotencyRecord{}, fmt.Errorf("claim idempotency key: lost the upsert too often")
}

// DeleteIdempotencyKey implements conversations.IdempotencyStore: one
// delete conditional on created_at.
func (s *Store) DeleteIdempotencyKey(ctx context.Context, rec conversations.IdempotencyRecord) error {
	filter := append(keyFilter(rec.IdempotencyKey), bson.E{Key: "created_at", Value: rec.CreatedAt.UTC()})
	_, err := s.idempotency.DeleteOne(ctx, filter)
	return mongoconn.Wrap(err, "expire idempotency key")
}

// SaveIdempotentResult implements conversations.IdempotencyStore: one
// update conditional on nothing being stored yet.
func (s *Store) SaveIdempotentResult(ctx context.Context, key conversations.IdempotencyKey, created conversations.Created) error {
	var d createdDoc
	if c := created.Conversation; c != nil {
		doc := toDoc(*c)
		d.Conversation = &doc
	}
	if m := created.Message; m != nil {
		doc := toMessageDoc(*m)
		d.Message = &doc
	}
	filter := append(keyFilter(key), bson.E{Key: "created", Value: nil})
	_, err := s.idempotency.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "created", Value: d}}}})
	return mongoconn.Wrap(err, "save idempotent result")
}

// DeleteIdempotencyKeysBefore implements conversations.IdempotencyStore;
// the by_created_at index keeps it cheap.
func (s *Store) DeleteIdempotencyKeysBefore(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.idempotency.DeleteMany(ctx, bson.D{{Key: "created_at", Value: bson.D{{Key: "$lte", Value: t.UTC()}}}})
	if err != nil {
		return 0, mongoconn.Wrap(err, "purge idempotency keys")
	}
	return res.DeletedCount, nil
}

func (d idempotencyDoc) domain() conversations.IdempotencyRecord {
	rec := conversations.IdempotencyRecord{
		IdempotencyKey: conversations.IdempotencyKey{AccountID: d.AccountID, Caller: d.Caller, Key: d.Key},
		Fingerprint:    d.Fingerprint, ResourceID: d.ResourceID, CreatedAt: d.CreatedAt.UTC(),
	}
	if d.Created != nil {
		rec.Created = &conversations.Created{}
		if d.Created.Conversation != nil {
			c := d.Created.Conversation.domain()
			rec.Created.Conversation = &c
		}
		if d.Created.Message != nil {
			m := d.Created.Message.domain()
			rec.Created.Message = &m
		}
	}
	return rec
}
