package mongoconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// LoadOrCreate returns the string value of the document with _id id in
// coll, first storing the output of generate when there is none. Replicas
// that start together race on one upsert with $setOnInsert keyed by _id:
// one document wins and every replica reads that one back, so all agree
// (on a shared secret such as the conversations service's cursor key) without a transaction.
func LoadOrCreate(ctx context.Context, coll *mongo.Collection, id string, generate func() (string, error)) (string, error) {
	type doc struct {
		Value string `bson:"value"`
	}
	filter := bson.D{{Key: "_id", Value: id}}
	var d doc
	err := coll.FindOne(ctx, filter).Decode(&d)
	if err == nil {
		return d.Value, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return "", Wrap(err, "load "+id)
	}
	fresh, err := generate()
	if err != nil {
		return "", fmt.Errorf("generate %s: %w", id, err)
	}
	_, err = coll.UpdateOne(ctx, filter,
		bson.D{{Key: "$setOnInsert", Value: bson.D{
			{Key: "value", Value: fresh},
			{Key: "created_at", Value: time.Now().UTC()},
		}}},
		options.UpdateOne().SetUpsert(true))
	// The loser of a concurrent upsert on one _id may get a duplicate key
	// error; the winner's value is stored then, which is what we read next.
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return "", Wrap(err, "store "+id)
	}
	if err := coll.FindOne(ctx, filter).Decode(&d); err != nil {
		return "", Wrap(err, "reload "+id)
	}
	return d.Value, nil
}
