// Package mongo implements the conversations store on MongoDB
// (go.mongodb.org/mongo-driver/v2).
//
// Documents: {_id, account_id, subject, status, participants[], created_at,
// updated_at, last_message_at}. Indexes (created at start, idempotently, by
// EnsureIndexes), and the query each serves:
//
//	by_participant         {account_id:1, participants:1, updated_at:-1, _id:-1}
//	    list without a status filter: equality on account_id and one
//	    participant (multikey), then the sort order itself, so the keyset
//	    condition (updated_at, _id) < cursor is a range on the index and a
//	    page reads limit+1 index entries at any depth, with no in-memory sort.
//	by_participant_status  {account_id:1, participants:1, status:1, updated_at:-1, _id:-1}
//	    the same list filtered by status.
//	_id (built in)         get one conversation; the filter adds account_id and
//	    participants, checked on the one document the _id finds.
//
// Paging is keyset, never skip: the cost of a page does not grow with its
// depth. A large deployment shards on {account_id: 1, _id: 1}: every query
// carries account_id, so it is routed to the shards of one account, and the
// _id suffix splits a very large account across chunks.
package mongo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongodb"
	"github.com/acme/platform/services/conversations"
)

// Store implements conversations.Store.
type Store struct {
	conversations *mongo.Collection
	settings      *mongo.Collection
	now           func() time.Time
}

var _ conversations.Store = (*Store)(nil)

// New returns a Store on db. Call EnsureIndexes once at start.
func New(db *mongo.Database) *Store {
	return &Store{
		conversations: db.Collection("conversations"),
		settings:      db.Collection("settings"),
		now:           func() time.Time { return time.Now().UTC().Truncate(time.Millisecond) },
	}
}

// EnsureIndexes creates the indexes of the package doc; a no-op when they
// exist, so every replica may call it at every start.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	models := []mongo.IndexModel{
		{
			Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "participants", Value: 1},
				{Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}},
			Options: options.Index().SetName("by_participant"),
		},
		{
			Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "participants", Value: 1}, {Key: "status", Value: 1},
				{Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}},
			Options: options.Index().SetName("by_participant_status"),
		},
	}
	// One at a time: the embedded server drops the connection when
	// createIndexes with several indexes meets existing ones.
	for _, m := range models {
		if _, err := s.conversations.Indexes().CreateOne(ctx, m); err != nil {
			return mongodb.Wrap(err, "create conversation indexes")
		}
	}
	return nil
}

// LoadOrCreateSecret returns the named secret, generating and storing it on
// first use, so that every replica shares it (the cursor MAC key).
func (s *Store) LoadOrCreateSecret(ctx context.Context, name string, generate func() (string, error)) (string, error) {
	return mongodb.LoadOrCreate(ctx, s.settings, name, generate)
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
}

// CreateConversation stores c with a new id; createdAt and updatedAt are now.
func (s *Store) CreateConversation(ctx context.Context, c conversations.Conversation) (conversations.Conversation, error) {
	now := s.now()
	c.ID, c.CreatedAt, c.UpdatedAt = newID(), now, now
	if _, err := s.conversations.InsertOne(ctx, toDoc(c)); err != nil {
		return conversations.Conversation{}, mongodb.Wrap(err, "create conversation")
	}
	return c, nil
}

// GetConversation returns the conversation id of the account in which
// participant takes part.
func (s *Store) GetConversation(ctx context.Context, accountID, participant, id string) (conversations.Conversation, error) {
	var d conversationDoc
	err := s.conversations.FindOne(ctx, bson.D{
		{Key: "_id", Value: id},
		{Key: "account_id", Value: accountID},
		{Key: "participants", Value: participant},
	}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return conversations.Conversation{}, fmt.Errorf("conversation %q: %w", id, conversations.ErrNotFound)
	}
	if err != nil {
		return conversations.Conversation{}, mongodb.Wrap(err, "get conversation")
	}
	return d.domain(), nil
}

// ListConversations returns one page in the order updatedAt descending,
// then id descending, starting strictly after q.After.
func (s *Store) ListConversations(ctx context.Context, q conversations.ListQuery) (conversations.Page, error) {
	filter := bson.D{
		{Key: "account_id", Value: q.AccountID},
		{Key: "participants", Value: q.Participant},
	}
	hint := "by_participant"
	if q.Status != "" {
		filter = append(filter, bson.E{Key: "status", Value: string(q.Status)})
		hint = "by_participant_status"
	}
	if q.After != nil {
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: q.After.UpdatedAt}}}},
			bson.D{{Key: "updated_at", Value: q.After.UpdatedAt}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: q.After.ID}}}},
		}})
	}
	// One more than a page tells whether another page follows.
	opts := options.Find().
		SetSort(bson.D{{Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}}).
		SetLimit(int64(q.Limit) + 1).
		SetHint(hint)
	cur, err := s.conversations.Find(ctx, filter, opts)
	if err != nil {
		return conversations.Page{}, mongodb.Wrap(err, "list conversations")
	}
	var docs []conversationDoc
	if err := cur.All(ctx, &docs); err != nil {
		return conversations.Page{}, mongodb.Wrap(err, "list conversations")
	}
	page := conversations.Page{Conversations: make([]conversations.Conversation, 0, min(len(docs), q.Limit))}
	for i, d := range docs {
		if i == q.Limit {
			last := page.Conversations[q.Limit-1]
			page.Next = &conversations.Position{UpdatedAt: last.UpdatedAt, ID: last.ID}
			break
		}
		page.Conversations = append(page.Conversations, d.domain())
	}
	return page, nil
}

func toDoc(c conversations.Conversation) conversationDoc {
	return conversationDoc{
		ID: c.ID, AccountID: c.AccountID, Subject: c.Subject, Status: string(c.Status),
		Participants: c.Participants, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt, LastMessageAt: c.LastMessageAt,
	}
}

func (d conversationDoc) domain() conversations.Conversation {
	c := conversations.Conversation{
		ID: d.ID, AccountID: d.AccountID, Subject: d.Subject, Status: conversations.Status(d.Status),
		Participants: d.Participants, CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(),
	}
	if d.LastMessageAt != nil {
		t := d.LastMessageAt.UTC()
		c.LastMessageAt = &t
	}
	return c
}

// newID returns "cnv_" and 96 random bits: ids appear in URLs, so they must
// not be guessable. The listing order never depends on them beyond breaking
// ties of equal updatedAt.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24
	return "cnv_" + hex.EncodeToString(b[:])
}
