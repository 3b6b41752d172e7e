package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/account"
)

// definitionDoc stores config as the JSON text the client sent rather than
// as a BSON sub-document: it is never queried, and JSON text round-trips
// exactly (large integers, key order, keys with '$' or '.').
type definitionDoc struct {
	ID        string    `bson:"_id"`
	AccountID string    `bson:"account_id"`
	Name      string    `bson:"name"`
	Type      string    `bson:"type"`
	Config    string    `bson:"config"`
	Enabled   bool      `bson:"enabled"`
	CreatedAt time.Time `bson:"created_at"`
	UpdatedAt time.Time `bson:"updated_at"`
}

// CreateDefinition stores d in d.AccountID with a new id and timestamps.
func (s *Store) CreateDefinition(ctx context.Context, d account.Definition) (account.Definition, error) {
	now := s.now()
	d.ID, d.CreatedAt, d.UpdatedAt = newID("def"), now, now
	if _, err := s.definitions.InsertOne(ctx, toDefinitionDoc(d)); err != nil {
		return account.Definition{}, mongoconn.Wrap(err, "create definition")
	}
	return d, nil
}

// ListDefinitions returns the definitions of an account, oldest first.
func (s *Store) ListDefinitions(ctx context.Context, accountID string) ([]account.Definition, error) {
	defs, err := listOfAccount(ctx, s.definitions, accountID, account.MaxDefinitionsPerAcc, definitionDoc.domain)
	if err != nil {
		return nil, mongoconn.Wrap(err, "list definitions")
	}
	return defs, nil
}

// listOfAccount finds the documents of an account, oldest first (the
// {account_id, created_at, _id} indexes of definitions and clients), at
// most limit of them.
func listOfAccount[D, T any](ctx context.Context, coll *mongo.Collection, accountID string, limit int64, domain func(D) T) ([]T, error) {
	cur, err := coll.Find(ctx, bson.D{{Key: "account_id", Value: accountID}},
		options.Find().
			SetSort(bson.D{{Key: "created_at", Value: 1}, {Key: "_id", Value: 1}}).
			SetLimit(limit))
	if err != nil {
		return nil, err
	}
	var docs []D
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make([]T, 0, len(docs))
	for _, doc := range docs {
		out = append(out, domain(doc))
	}
	return out, nil
}

// GetDefinition returns one definition of the account.
func (s *Store) GetDefinition(ctx context.Context, accountID, id string) (account.Definition, error) {
	var doc definitionDoc
	err := s.definitions.FindOne(ctx, definitionKey(accountID, id)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.Definition{}, fmt.Errorf("definition %q: %w", id, account.ErrNotFound)
	}
	if err != nil {
		return account.Definition{}, mongoconn.Wrap(err, "get definition")
	}
	return doc.domain(), nil
}

// ReplaceDefinition replaces the mutable fields of d (by d.AccountID and
// d.ID) in one conditional update and returns the stored result.
func (s *Store) ReplaceDefinition(ctx context.Context, d account.Definition) (account.Definition, error) {
	set := bson.D{
		{Key: "name", Value: d.Name},
		{Key: "type", Value: d.Type},
		{Key: "config", Value: string(d.Config)},
		{Key: "enabled", Value: d.Enabled},
		{Key: "updated_at", Value: s.now()},
	}
	var doc definitionDoc
	err := s.definitions.FindOneAndUpdate(ctx, definitionKey(d.AccountID, d.ID),
		bson.D{{Key: "$set", Value: set}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.Definition{}, fmt.Errorf("definition %q: %w", d.ID, account.ErrNotFound)
	}
	if err != nil {
		return account.Definition{}, mongoconn.Wrap(err, "replace definition")
	}
	return doc.domain(), nil
}

// DeleteDefinition removes one definition of the account.
func (s *Store) DeleteDefinition(ctx context.Context, accountID, id string) error {
	res, err := s.definitions.DeleteOne(ctx, definitionKey(accountID, id))
	if err != nil {
		return mongoconn.Wrap(err, "delete definition")
	}
	if res.DeletedCount == 0 {
		return fmt.Errorf("definition %q: %w", id, account.ErrNotFound)
	}
	return nil
}

// definitionKey scopes every access by account: an id of another account
// matches nothing, exactly like an id that does not exist.
func definitionKey(accountID, id string) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "account_id", Value: accountID}}
}

func toDefinitionDoc(d account.Definition) definitionDoc {
	return definitionDoc{
		ID: d.ID, AccountID: d.AccountID, Name: d.Name, Type: d.Type, Config: string(d.Config),
		Enabled: d.Enabled, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	}
}

func (d definitionDoc) domain() account.Definition {
	return account.Definition{
		ID: d.ID, AccountID: d.AccountID, Name: d.Name, Type: d.Type, Config: []byte(d.Config),
		Enabled: d.Enabled, CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(),
	}
}
