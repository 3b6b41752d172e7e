// Package mongostore implements the conversations store on MongoDB
// (go.mongodb.org/mongo-driver/v2).
//
// Collections, their documents, and the indexes (created at start,
// idempotently, by EnsureIndexes) with the query each serves:
//
// conversations: {_id, account_id, subject, status, participants[],
// created_at, updated_at, last_message_at, version}
//
//	by_participant         {account_id:1, participants:1, updated_at:-1, _id:-1}
//	    list without a status filter: equality on account_id and one
//	    participant (multikey), then the sort order itself, so the keyset
//	    condition (updated_at, _id) < cursor, and updatedAfter (updated_at >
//	    t), are ranges on the index and a page reads limit+1 index entries
//	    at any depth, with no in-memory sort.
//	by_participant_status  {account_id:1, participants:1, status:1, updated_at:-1, _id:-1}
//	    the same list filtered by status.
//	by_account             {account_id:1, updated_at:-1, _id:-1}
//	    the account-wide list of a service client (every conversation of
//	    its account): equality on account_id, then the sort order, so
//	    keyset and updatedAfter are ranges on the index, as above.
//	by_account_status      {account_id:1, status:1, updated_at:-1, _id:-1}
//	    the account-wide list filtered by status.
//	_id (built in)         get one conversation; the filter adds account_id
//	    (and participants for a user), checked on the one document the _id
//	    finds. Every change is a compare-and-set on {_id, account_id,
//	    version}.
//
// messages: {_id, account_id, conversation_id, author, body, metadata
// (JSON text), created_at}
//
//	by_conversation        {account_id:1, conversation_id:1, created_at:-1, _id:-1}
//	    the messages of a conversation, newest first, keyset-paged like
//	    the conversations.
//	_id (built in)         get one message; the filter adds account_id and
//	    conversation_id.
//
// idempotency_keys: {_id, account_id, caller, key, fingerprint,
// resource_id, created_at, response}
//
//	by_key (unique)        {account_id:1, caller:1, key:1}
//	    claim a key: one upsert, so concurrent requests with one key get one
//	    record.
//	by_created_at          {created_at:1}
//	    the purge of keys older than 24 hours (no TTL index on the embedded
//	    store).
//
// Paging is keyset, never skip: the cost of a page does not grow with its
// depth. A large deployment shards conversations and messages on
// {account_id: 1, _id: 1}: every query carries account_id, so it is routed
// to the shards of one account, and the _id suffix splits a very large
// account across chunks.
//
// No write spans two documents in a transaction. A change of a
// conversation is one compare-and-set on its version; a post is two writes
// in a fixed order (see conversations.MessageStore and messages.go).
package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/conversations"
)

// Store implements conversations.Store.
type Store struct {
	conversations *mongo.Collection
	messages      *mongo.Collection
	idempotency   *mongo.Collection
	settings      *mongo.Collection
	now           func() time.Time
}

var _ conversations.Store = (*Store)(nil)

// New returns a Store on db. Call EnsureIndexes once at start.
func New(db *mongo.Database) *Store {
	return &Store{
		conversations: db.Collection("conversations"),
		messages:      db.Collection("messages"),
		idempotency:   db.Collection("idempotency_keys"),
		settings:      db.Collection("settings"),
		now:           func() time.Time { return time.Now().UTC().Truncate(time.Millisecond) },
	}
}

// WithClock returns a copy of s that reads the time from now instead of the
// system clock, for tests of rules that depend on time (key expiry).
func (s *Store) WithClock(now func() time.Time) *Store {
	c := *s
	c.now = func() time.Time { return now().UTC().Truncate(time.Millisecond) }
	return &c
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
	}
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
}

// visibleTo is Caller.MayAccess as a query filter: the conversations of
// the caller's account in which the caller takes part, or every one of the
// account for a service client. Every read and every change of a
// conversation starts from it.
func visibleTo(who conversations.Caller) bson.D {
	if who.Client {
		return bson.D{{Key: "account_id", Value: who.AccountID}}
	}
	return bson.D{
		{Key: "account_id", Value: who.AccountID},
		{Key: "participants", Value: who.ID},
	}
}

// listIndex is the index that serves a listing of visibleTo(who), with or
// without a status filter (see the package doc).
func listIndex(who conversations.Caller, byStatus bool) string {
	name := "by_participant"
	if who.Client {
		name = "by_account"
	}
	if byStatus {
		name += "_status"
	}
	return name
}

// CreateConversation implements conversations.ConversationStore.
func (s *Store) CreateConversation(ctx context.Context, who conversations.Caller, c conversations.Conversation) (conversations.Conversation, error) {
	now := s.now()
	if c.ID == "" {
		c.ID = conversations.NewConversationID()
	}
	c.CreatedAt, c.UpdatedAt, c.Version = now, now, 1
	_, err := s.conversations.InsertOne(ctx, toDoc(c))
	if mongo.IsDuplicateKeyError(err) {
		// An idempotent retry whose first attempt stored it.
		return s.GetConversation(ctx, who, c.ID)
	}
	if err != nil {
		return conversations.Conversation{}, mongoconn.Wrap(err, "create conversation")
	}
	return c, nil
}

// GetConversation implements conversations.ConversationStore.
func (s *Store) GetConversation(ctx context.Context, who conversations.Caller, id string) (conversations.Conversation, error) {
	var d conversationDoc
	err := s.conversations.FindOne(ctx, append(bson.D{{Key: "_id", Value: id}}, visibleTo(who)...)).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return conversations.Conversation{}, fmt.Errorf("conversation %q: %w", id, conversations.ErrNotFound)
	}
	if err != nil {
		return conversations.Conversation{}, mongoconn.Wrap(err, "get conversation")
	}
	return d.domain(), nil
}

// ListConversations returns one page in the order updatedAt descending,
// then id descending, starting strictly after q.After.
func (s *Store) ListConversations(ctx context.Context, q conversations.ListQuery) (conversations.Page, error) {
	filter := visibleTo(q.Caller)
	hint := listIndex(q.Caller, q.Status != "")
	if q.Status != "" {
		filter = append(filter, bson.E{Key: "status", Value: string(q.Status)})
	}
	if q.UpdatedAfter != nil {
		// The same index: updated_at follows the equality fields.
		filter = append(filter, bson.E{Key: "updated_at", Value: bson.D{{Key: "$gt", Value: q.UpdatedAfter.UTC()}}})
	}
	items, next, err := findPage(ctx, s.conversations, filter, "updated_at", hint, q.After, q.Limit,
		conversationDoc.domain, func(c conversations.Conversation) conversations.Position {
			return conversations.Position{Time: c.UpdatedAt, ID: c.ID}
		})
	if err != nil {
		return conversations.Page{}, mongoconn.Wrap(err, "list conversations")
	}
	return conversations.Page{Conversations: items, Next: next}, nil
}

// findPage runs one keyset-paged find of both listings: sorted by field
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

// UpdateConversation implements conversations.ConversationStore.
func (s *Store) UpdateConversation(ctx context.Context, who conversations.Caller, id string, patch conversations.Patch, cond conversations.Precondition) (conversations.Conversation, error) {
	return s.change(ctx, who, id, cond, nil, func(c *conversations.Conversation, now time.Time) (bool, error) {
		return patch.Apply(c, now), nil
	})
}

// AddParticipant implements conversations.ConversationStore.
func (s *Store) AddParticipant(ctx context.Context, who conversations.Caller, id, userID string, cond conversations.Precondition) (conversations.Conversation, error) {
	return s.change(ctx, who, id, cond, nil, func(c *conversations.Conversation, now time.Time) (bool, error) {
		return c.AddParticipant(userID, now)
	})
}

// RemoveParticipant implements conversations.ConversationStore.
func (s *Store) RemoveParticipant(ctx context.Context, who conversations.Caller, id, userID string, cond conversations.Precondition) (conversations.Conversation, error) {
	return s.change(ctx, who, id, cond, nil, func(c *conversations.Conversation, now time.Time) (bool, error) {
		return c.RemoveParticipant(userID, now)
	})
}

// change reads the conversation id who may access (or starts from read,
// when the caller has just read it), applies apply to a copy, and writes
// the result with one compare-and-set on the version it read. A lost
// compare-and-set means another change came first: with an If-Match that
// names versions, that is a 412 (the caller's tag is stale now); otherwise
// the change is applied again to the new state, up to MaxChangeAttempts
// times. A change that changes nothing writes nothing.
func (s *Store) change(ctx context.Context, who conversations.Caller, id string, cond conversations.Precondition,
	read *conversations.Conversation, apply func(c *conversations.Conversation, now time.Time) (bool, error)) (conversations.Conversation, error) {
	for range conversations.MaxChangeAttempts {
		var cur conversations.Conversation
		if read != nil {
			cur, read = *read, nil
		} else {
			var err error
			if cur, err = s.GetConversation(ctx, who, id); err != nil {
				return conversations.Conversation{}, err
			}
		}
		if !cond.Matches(cur.Version) {
			return conversations.Conversation{}, fmt.Errorf("conversation %q at version %d: %w", id, cur.Version, conversations.ErrPreconditionFailed)
		}
		next := cur
		next.Participants = slices.Clone(cur.Participants)
		changed, err := apply(&next, s.now())
		if err != nil {
			return conversations.Conversation{}, fmt.Errorf("conversation %q: %w", id, err)
		}
		if !changed {
			return cur, nil
		}
		next.Version = cur.Version + 1
		won, err := s.compareAndSet(ctx, cur.Version, next)
		if err != nil {
			return conversations.Conversation{}, err
		}
		if won {
			return next, nil
		}
		if cond.Given && !cond.Any {
			return conversations.Conversation{}, fmt.Errorf("conversation %q changed after version %d: %w", id, cur.Version, conversations.ErrPreconditionFailed)
		}
	}
	return conversations.Conversation{}, fmt.Errorf("conversation %q: %w", id, conversations.ErrContended)
}

// compareAndSet stores next if the stored document is still at version
// from: one conditional single-document update.
func (s *Store) compareAndSet(ctx context.Context, from int64, next conversations.Conversation) (bool, error) {
	filter := bson.D{{Key: "_id", Value: next.ID}, {Key: "account_id", Value: next.AccountID}}
	if from == 0 {
		// Written before versions existed: no version field yet.
		filter = append(filter, bson.E{Key: "version", Value: bson.D{{Key: "$exists", Value: false}}})
	} else {
		filter = append(filter, bson.E{Key: "version", Value: from})
	}
	d := toDoc(next)
	res, err := s.conversations.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{
		{Key: "subject", Value: d.Subject},
		{Key: "status", Value: d.Status},
		{Key: "participants", Value: d.Participants},
		{Key: "updated_at", Value: d.UpdatedAt},
		{Key: "last_message_at", Value: d.LastMessageAt},
		{Key: "version", Value: d.Version},
	}}})
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
