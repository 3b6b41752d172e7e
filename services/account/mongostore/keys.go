package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/account"
)

// signingKeysDoc is the keyring of one algorithm: one document, so that
// every change (first key, successor, pruning) is one conditional write.
type signingKeysDoc struct {
	ID        string          `bson:"_id"` // "keyring:<alg>"
	Alg       string          `bson:"alg"`
	Version   int64           `bson:"version"`
	Keys      []signingKeyDoc `bson:"keys"`
	UpdatedAt time.Time       `bson:"updated_at"`
}

type signingKeyDoc struct {
	KID       string     `bson:"kid"`
	Alg       string     `bson:"alg"`
	JWK       string     `bson:"jwk"` // private JWK JSON
	CreatedAt time.Time  `bson:"created_at"`
	SignsFrom time.Time  `bson:"signs_from"`
	ExpiresAt *time.Time `bson:"expires_at,omitempty"` // absent while newest
}

func signingKeysID(alg string) string { return "keyring:" + alg }

// SigningKeys returns the stored keyring of alg, or account.ErrNotFound.
func (s *Store) SigningKeys(ctx context.Context, alg string) (account.SigningKeys, error) {
	var doc signingKeysDoc
	err := s.keys.FindOne(ctx, bson.D{{Key: "_id", Value: signingKeysID(alg)}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.SigningKeys{}, fmt.Errorf("signing keys %s: %w", alg, account.ErrNotFound)
	}
	if err != nil {
		return account.SigningKeys{}, mongoconn.Wrap(err, "load signing keys")
	}
	return doc.domain(alg), nil
}

// CreateSigningKeys inserts the keyring of alg as version 1. Of replicas
// racing at first start one insert wins; the others get a duplicate key
// error on _id, reported as account.ErrDuplicate.
func (s *Store) CreateSigningKeys(ctx context.Context, alg string, keys []account.SigningKey) (account.SigningKeys, error) {
	doc := signingKeysDoc{ID: signingKeysID(alg), Alg: alg, Version: 1, Keys: toSigningKeyDocs(keys), UpdatedAt: s.now()}
	if _, err := s.keys.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return account.SigningKeys{}, fmt.Errorf("create signing keys %s: %w", alg, account.ErrDuplicate)
		}
		return account.SigningKeys{}, mongoconn.Wrap(err, "create signing keys")
	}
	return doc.domain(alg), nil
}

// UpdateSigningKeys replaces the keys of alg in one conditional update on
// {_id, version}: of replicas changing the keyring at once, one matches and
// the others get account.ErrSigningKeysChanged.
func (s *Store) UpdateSigningKeys(ctx context.Context, alg string, version int64, keys []account.SigningKey) (account.SigningKeys, error) {
	docs := toSigningKeyDocs(keys)
	res, err := s.keys.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: signingKeysID(alg)}, {Key: "version", Value: version}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "keys", Value: docs},
			{Key: "version", Value: version + 1},
			{Key: "updated_at", Value: s.now()},
		}}})
	if err != nil {
		return account.SigningKeys{}, mongoconn.Wrap(err, "update signing keys")
	}
	if res.MatchedCount == 0 {
		return account.SigningKeys{}, fmt.Errorf("update signing keys %s version %d: %w", alg, version, account.ErrSigningKeysChanged)
	}
	doc := signingKeysDoc{Alg: alg, Version: version + 1, Keys: docs}
	return doc.domain(alg), nil
}

func toSigningKeyDocs(keys []account.SigningKey) []signingKeyDoc {
	docs := make([]signingKeyDoc, 0, len(keys))
	for _, k := range keys {
		d := signingKeyDoc{
			KID: k.KID, Alg: k.Alg, JWK: string(k.JWK),
			CreatedAt: k.CreatedAt.UTC().Truncate(time.Millisecond),
			SignsFrom: k.SignsFrom.UTC().Truncate(time.Millisecond),
		}
		if !k.ExpiresAt.IsZero() {
			exp := k.ExpiresAt.UTC().Truncate(time.Millisecond)
			d.ExpiresAt = &exp
		}
		docs = append(docs, d)
	}
	return docs
}

func (d signingKeysDoc) domain(alg string) account.SigningKeys {
	out := account.SigningKeys{Alg: alg, Version: d.Version, Keys: make([]account.SigningKey, 0, len(d.Keys))}
	for _, k := range d.Keys {
		key := account.SigningKey{
			KID: k.KID, Alg: k.Alg, JWK: []byte(k.JWK),
			CreatedAt: k.CreatedAt.UTC(), SignsFrom: k.SignsFrom.UTC(),
		}
		if k.ExpiresAt != nil {
			key.ExpiresAt = k.ExpiresAt.UTC()
		}
		out.Keys = append(out.Keys, key)
	}
	return out
}
