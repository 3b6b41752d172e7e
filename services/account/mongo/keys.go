package mongo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongodb"
)

type signingKeyDoc struct {
	Alg       string    `bson:"_id"`
	JWK       string    `bson:"jwk"`
	CreatedAt time.Time `bson:"created_at"`
}

// LoadOrCreateSigningKey returns the stored key for alg, inserting the
// output of generate when there is none. Replicas starting together race on
// one upsert with $setOnInsert keyed by _id: one document wins, and every
// replica reads that one back, so all sign with the same key.
func (s *Store) LoadOrCreateSigningKey(ctx context.Context, alg string, generate func() ([]byte, error)) ([]byte, error) {
	var doc signingKeyDoc
	err := s.keys.FindOne(ctx, bson.D{{Key: "_id", Value: alg}}).Decode(&doc)
	if err == nil {
		return []byte(doc.JWK), nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return nil, mongodb.Wrap(err, "load signing key")
	}
	fresh, err := generate()
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	_, err = s.keys.UpdateOne(ctx, bson.D{{Key: "_id", Value: alg}},
		bson.D{{Key: "$setOnInsert", Value: bson.D{
			{Key: "jwk", Value: string(fresh)},
			{Key: "created_at", Value: s.now()},
		}}},
		options.UpdateOne().SetUpsert(true))
	// A concurrent upsert on the same _id can fail with a duplicate key
	// error; the other replica's key is then stored, which is what we read.
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return nil, mongodb.Wrap(err, "store signing key")
	}
	if err := s.keys.FindOne(ctx, bson.D{{Key: "_id", Value: alg}}).Decode(&doc); err != nil {
		return nil, mongodb.Wrap(err, "reload signing key")
	}
	return []byte(doc.JWK), nil
}
