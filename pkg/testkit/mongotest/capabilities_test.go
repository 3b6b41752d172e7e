package mongotest_test

// These tests double as the list of MongoDB features store code may rely on:
// each one passes on MongoDB (mongo:8 or $MONGODB_URI) and on the embedded
// FerretDB that runs where neither is available. Where FerretDB behaves
// differently, the test is named TestEmbedded... and asserts what FerretDB
// actually does, so a FerretDB upgrade that changes it shows up here.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/testkit/mongoproc"
	"github.com/acme/platform/pkg/testkit/mongotest"
)

// isFerretDB reports whether db's server is FerretDB rather than MongoDB:
// FerretDB adds ferretdbVersion to buildInfo.
func isFerretDB(t *testing.T, db *mongo.Database) bool {
	t.Helper()
	var info bson.M
	if err := db.Client().Database("admin").RunCommand(t.Context(), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		t.Fatalf("buildInfo: %v", err)
	}
	_, ok := info["ferretdbVersion"]
	return ok
}

// commandErrorCode returns the server's error code in err, or 0.
func commandErrorCode(err error) int32 {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return ce.Code
	}
	var we mongo.WriteException
	if errors.As(err, &we) && len(we.WriteErrors) > 0 {
		return int32(we.WriteErrors[0].Code)
	}
	return 0
}

// indexSpec returns the specification of the index named name.
func indexSpec(t *testing.T, coll *mongo.Collection, name string) mongo.IndexSpecification {
	t.Helper()
	specs, err := coll.Indexes().ListSpecifications(t.Context())
	if err != nil {
		t.Fatalf("ListSpecifications: %v", err)
	}
	for _, s := range specs {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("index %q not found among %v", name, specs)
	return mongo.IndexSpecification{}
}

func TestUniqueCompoundIndex(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("users")

	name, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "account_id", Value: 1}, {Key: "username", Value: 1}},
		Options: options.Index().SetUnique(true),
	})
	if err != nil {
		t.Fatalf("CreateOne unique: %v", err)
	}
	if spec := indexSpec(t, coll, name); spec.Unique == nil || !*spec.Unique {
		t.Errorf("index %s is not reported unique", name)
	}

	insert := func(id, account, username string) error {
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "account_id", Value: account}, {Key: "username", Value: username}})
		return err
	}
	if err := insert("1", "a", "alice"); err != nil {
		t.Fatalf("first insert: %v", err)
	}
	// Same username in another account, and another username in the same
	// account, are fine.
	if err := insert("2", "b", "alice"); err != nil {
		t.Errorf("same username, other account: %v", err)
	}
	if err := insert("3", "a", "bob"); err != nil {
		t.Errorf("other username, same account: %v", err)
	}

	err = insert("4", "a", "alice")
	if !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("duplicate insert: got %v, want a duplicate key error", err)
	}
	t.Logf("duplicate insert error (code %d): %v", commandErrorCode(err), err)

	// An upsert that inserts a duplicate fails the same way.
	_, err = coll.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: "5"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "account_id", Value: "a"}, {Key: "username", Value: "bob"}}}},
		options.UpdateOne().SetUpsert(true))
	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("upsert inserting a duplicate: got %v, want a duplicate key error", err)
	}

	// Uniqueness is case-sensitive, and numbers compare by value (7 == 7.0).
	if err := insert("6", "a", "Alice"); err != nil {
		t.Errorf("username differing in case only: %v", err)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "7"}, {Key: "account_id", Value: int32(7)}, {Key: "username", Value: "n"}}); err != nil {
		t.Fatalf("insert numeric account_id: %v", err)
	}
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "8"}, {Key: "account_id", Value: 7.0}, {Key: "username", Value: "n"}})
	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("account_id 7.0 after 7: got %v, want a duplicate key error", err)
	}

	// And a duplicate _id too.
	if err := insert("1", "z", "zed"); !mongo.IsDuplicateKeyError(err) {
		t.Errorf("duplicate _id: got %v, want a duplicate key error", err)
	}
}

func TestCreateIndexIsIdempotent(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("users")
	model := mongo.IndexModel{
		Keys:    bson.D{{Key: "account_id", Value: 1}, {Key: "username", Value: 1}},
		Options: options.Index().SetUnique(true),
	}

	// Services create their indexes at every start; that must not fail.
	for i := range 3 {
		if _, err := coll.Indexes().CreateOne(ctx, model); err != nil {
			t.Fatalf("CreateOne #%d: %v", i+1, err)
		}
	}
	if _, err := coll.Indexes().CreateMany(ctx, []mongo.IndexModel{model}); err != nil {
		t.Fatalf("CreateMany with the existing index: %v", err)
	}
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		t.Fatalf("ListSpecifications: %v", err)
	}
	if len(specs) != 2 { // _id_ and ours
		t.Errorf("got %d indexes, want 2: %v", len(specs), specs)
	}

	// Another index under an existing name is refused.
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "other", Value: 1}},
		Options: options.Index().SetName("account_id_1_username_1"),
	})
	const indexKeySpecsConflict = 86
	if code := commandErrorCode(err); code != indexKeySpecsConflict {
		t.Errorf("other keys under an existing index name: got %v (code %d), want IndexKeySpecsConflict (%d)", err, code, indexKeySpecsConflict)
	}
}

// TestEmbeddedIgnoresConflictingIndexOptions: re-creating an existing index
// with other options (here: without unique) is an error on MongoDB, but
// FerretDB returns success and keeps the old index unchanged. Index changes
// need an explicit drop and create; do not expect either server to apply
// them.
func TestEmbeddedIgnoresConflictingIndexOptions(t *testing.T) {
	ctx := t.Context()
	db := mongotest.New(t)
	ferret := isFerretDB(t, db)
	coll := db.Collection("users")
	keys := bson.D{{Key: "account_id", Value: 1}, {Key: "username", Value: 1}}
	name, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys, Options: options.Index().SetUnique(true)})
	if err != nil {
		t.Fatalf("CreateOne: %v", err)
	}

	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys})
	if ferret {
		if err != nil {
			t.Fatalf("FerretDB: re-creating without unique: got %v, want nil (FerretDB ignores the change)", err)
		}
	} else {
		// IndexOptionsConflict (85) or IndexKeySpecsConflict (86).
		if code := commandErrorCode(err); code != 85 && code != 86 {
			t.Fatalf("re-creating without unique: got %v (code %d), want code 85 or 86", err, code)
		}
	}
	t.Logf("FerretDB: %v; re-creating the index without unique: %v", ferret, err)
	if spec := indexSpec(t, coll, name); spec.Unique == nil || !*spec.Unique {
		t.Errorf("index %s lost unique", name)
	}
}

// TestEmbeddedUpdateIntoDuplicateIsInternalError: an update (UpdateOne,
// ReplaceOne, FindOneAndUpdate) that would violate a unique index fails on
// both servers, but FerretDB reports InternalError (code 1, "UNIQUE
// constraint failed" from SQLite) instead of E11000, so
// mongo.IsDuplicateKeyError is false there. Inserts, including upserts that
// insert, do report E11000 (see TestUniqueCompoundIndex). Tests of "rename
// to a taken name" paths cannot check the error kind on the embedded server.
func TestEmbeddedUpdateIntoDuplicateIsInternalError(t *testing.T) {
	ctx := t.Context()
	db := mongotest.New(t)
	ferret := isFerretDB(t, db)
	coll := db.Collection("users")
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "account_id", Value: 1}, {Key: "username", Value: 1}},
		Options: options.Index().SetUnique(true),
	}); err != nil {
		t.Fatalf("CreateOne: %v", err)
	}
	if _, err := coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "account_id", Value: "a"}, {Key: "username", Value: "alice"}},
		bson.D{{Key: "_id", Value: 2}, {Key: "account_id", Value: "a"}, {Key: "username", Value: "bob"}},
	}); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}

	toAlice := bson.D{{Key: "$set", Value: bson.D{{Key: "username", Value: "alice"}}}}
	bob := bson.D{{Key: "_id", Value: 2}}
	ops := map[string]func() error{
		"UpdateOne": func() error {
			_, err := coll.UpdateOne(ctx, bob, toAlice)
			return err
		},
		"ReplaceOne": func() error {
			_, err := coll.ReplaceOne(ctx, bob, bson.D{{Key: "account_id", Value: "a"}, {Key: "username", Value: "alice"}})
			return err
		},
		"FindOneAndUpdate": func() error {
			return coll.FindOneAndUpdate(ctx, bob, toAlice).Err()
		},
	}
	for name, op := range ops {
		err := op()
		switch {
		case err == nil:
			t.Errorf("%s into a duplicate: got nil error", name)
		case ferret:
			const internalError = 1
			if code := commandErrorCode(err); code != internalError || !strings.Contains(err.Error(), "UNIQUE constraint failed") {
				t.Errorf("FerretDB: %s into a duplicate: got %v (code %d), want InternalError (1) UNIQUE constraint failed", name, err, code)
			}
			if mongo.IsDuplicateKeyError(err) {
				t.Errorf("FerretDB: %s into a duplicate now reports a duplicate key error: update this test and its doc", name)
			}
		case !mongo.IsDuplicateKeyError(err):
			t.Errorf("%s into a duplicate: got %v, want a duplicate key error", name, err)
		}
	}

	// Nothing changed.
	if n, err := coll.CountDocuments(ctx, bson.D{{Key: "username", Value: "bob"}}); err != nil || n != 1 {
		t.Errorf("bob count = %d, %v; want 1", n, err)
	}
}

// TestEmbeddedUniqueIndexIgnoresMissingFields: MongoDB indexes a missing
// field as null, so two documents of one account without username collide
// on a unique {account_id, username} index. FerretDB (SQLite) treats them as
// distinct and accepts both. Always set the fields of unique indexes.
func TestEmbeddedUniqueIndexIgnoresMissingFields(t *testing.T) {
	ctx := t.Context()
	db := mongotest.New(t)
	ferret := isFerretDB(t, db)
	coll := db.Collection("users")
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "account_id", Value: 1}, {Key: "username", Value: 1}},
		Options: options.Index().SetUnique(true),
	}); err != nil {
		t.Fatalf("CreateOne: %v", err)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "account_id", Value: "a"}}); err != nil {
		t.Fatalf("first insert without username: %v", err)
	}
	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}, {Key: "account_id", Value: "a"}})
	if ferret {
		if err != nil {
			t.Errorf("FerretDB: second insert without username: got %v, want nil (missing fields never collide)", err)
		}
		return
	}
	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("second insert without username: got %v, want a duplicate key error", err)
	}
}

// TestEmbeddedLacksPartialIndexes: MongoDB supports partialFilterExpression
// (e.g. "unique email when present"); FerretDB v1 refuses it with
// NotImplemented (238). It accepts sparse but ignores it.
func TestEmbeddedLacksPartialIndexes(t *testing.T) {
	ctx := t.Context()
	db := mongotest.New(t)
	ferret := isFerretDB(t, db)
	coll := db.Collection("users")
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: bson.D{{Key: "email", Value: 1}},
		Options: options.Index().SetUnique(true).
			SetPartialFilterExpression(bson.D{{Key: "email", Value: bson.D{{Key: "$type", Value: "string"}}}}),
	})
	if ferret {
		const notImplemented = 238
		if code := commandErrorCode(err); code != notImplemented {
			t.Errorf("FerretDB: partial index: got %v (code %d), want NotImplemented (%d)", err, code, notImplemented)
		}
		t.Logf("FerretDB refuses partial indexes: %v", err)
	} else if err != nil {
		t.Errorf("partial index: %v", err)
	}

	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "phone", Value: 1}},
		Options: options.Index().SetUnique(true).SetSparse(true),
	}); err != nil {
		t.Errorf("sparse unique index: %v", err)
	}
}

func TestCompoundIndexMixedDirections(t *testing.T) {
	coll := mongotest.New(t).Collection("conversations")
	keys := bson.D{
		{Key: "account_id", Value: 1},
		{Key: "participants", Value: 1},
		{Key: "updated_at", Value: -1},
		{Key: "_id", Value: -1},
	}
	name, err := coll.Indexes().CreateOne(t.Context(), mongo.IndexModel{Keys: keys})
	if err != nil {
		t.Fatalf("CreateOne: %v", err)
	}
	if want := "account_id_1_participants_1_updated_at_-1__id_-1"; name != want {
		t.Errorf("index name = %q, want %q", name, want)
	}

	// The server keeps the key order and directions.
	var got bson.D
	if err := bson.Unmarshal(indexSpec(t, coll, name).KeysDocument, &got); err != nil {
		t.Fatalf("decoding keys: %v", err)
	}
	if len(got) != len(keys) {
		t.Fatalf("keys = %v, want %v", got, keys)
	}
	for i, e := range got {
		if e.Key != keys[i].Key || fmt.Sprint(e.Value) != fmt.Sprint(keys[i].Value) {
			t.Errorf("key %d = %v:%v, want %v:%v", i, e.Key, e.Value, keys[i].Key, keys[i].Value)
		}
	}
}

func TestFindOneAndUpdateConditional(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("tokens")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "tok"}, {Key: "used", Value: false}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}

	filter := bson.D{{Key: "_id", Value: "tok"}, {Key: "used", Value: false}}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "used", Value: true}, {Key: "used_by", Value: "u1"}}}}
	after := options.FindOneAndUpdate().SetReturnDocument(options.After)

	var doc struct {
		ID     string `bson:"_id"`
		Used   bool   `bson:"used"`
		UsedBy string `bson:"used_by"`
	}
	if err := coll.FindOneAndUpdate(ctx, filter, update, after).Decode(&doc); err != nil {
		t.Fatalf("first FindOneAndUpdate: %v", err)
	}
	if !doc.Used || doc.UsedBy != "u1" {
		t.Errorf("returned %+v, want the updated document", doc)
	}

	// The condition no longer holds: nothing matches.
	err := coll.FindOneAndUpdate(ctx, filter, update, after).Err()
	if !errors.Is(err, mongo.ErrNoDocuments) {
		t.Errorf("second FindOneAndUpdate: got %v, want mongo.ErrNoDocuments", err)
	}

	// ReturnDocument Before (the default) returns the old version.
	var before bson.M
	err = coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "tok"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "used_by", Value: "u2"}}}}).Decode(&before)
	if err != nil {
		t.Fatalf("FindOneAndUpdate (before): %v", err)
	}
	if before["used_by"] != "u1" {
		t.Errorf("ReturnDocument Before returned %v, want used_by u1", before)
	}
}

// raceStart runs f(i) for i in [0,n) in n goroutines released together, so
// they really compete.
func raceStart(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// TestConditionalUpdateRace: 10 goroutines try to consume a one-time token
// with FindOneAndUpdate({_id, used: false}, $set used); exactly one wins, in
// each of 10 rounds. This is what refresh-token reuse detection relies on.
// MongoDB guarantees it (single-document atomicity); the embedded server
// does because it runs one command at a time (FerretDB alone reads, then
// writes, without isolation, and lets several racers win).
func TestConditionalUpdateRace(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("tokens")

	const rounds, racers = 10, 10
	for r := range rounds {
		id := fmt.Sprint("tok", r)
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "used", Value: false}}); err != nil {
			t.Fatalf("InsertOne: %v", err)
		}
		var mu sync.Mutex
		var winners []int
		raceStart(racers, func(i int) {
			err := coll.FindOneAndUpdate(ctx,
				bson.D{{Key: "_id", Value: id}, {Key: "used", Value: false}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "used", Value: true}, {Key: "used_by", Value: i}}}},
			).Err()
			switch {
			case err == nil:
				mu.Lock()
				winners = append(winners, i)
				mu.Unlock()
			case errors.Is(err, mongo.ErrNoDocuments):
			default:
				t.Errorf("round %d racer %d: %v", r, i, err)
			}
		})
		if len(winners) != 1 {
			t.Errorf("round %d: racers %v consumed the token, want exactly 1", r, winners)
			continue
		}
		var doc struct {
			UsedBy int `bson:"used_by"`
		}
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
			t.Fatalf("round %d: FindOne: %v", r, err)
		}
		if doc.UsedBy != winners[0] {
			t.Errorf("round %d: token used_by %d, winner %d", r, doc.UsedBy, winners[0])
		}
	}
}

// TestUpsertSetOnInsertRace: 10 goroutines upsert the same _id with
// $setOnInsert; exactly one insert happens and the document is the winner's.
// The losers see either a match (MongoDB retries the upsert internally) or a
// duplicate key error, which callers must treat as "already exists".
func TestUpsertSetOnInsertRace(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("accounts")

	const rounds, racers = 10, 10
	outcomes := map[string]int{}
	for r := range rounds {
		id := fmt.Sprint("acc", r)
		var mu sync.Mutex
		winner := -1
		raceStart(racers, func(i int) {
			res, err := coll.UpdateOne(ctx,
				bson.D{{Key: "_id", Value: id}},
				bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: "created_by", Value: i}}}},
				options.UpdateOne().SetUpsert(true),
			)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && res.UpsertedCount == 1:
				outcomes["inserted"]++
				if winner != -1 {
					t.Errorf("round %d: racers %d and %d both inserted", r, winner, i)
				}
				winner = i
			case err == nil && res.MatchedCount == 1:
				outcomes["matched existing"]++
				if res.ModifiedCount != 0 {
					t.Errorf("round %d: $setOnInsert modified an existing document", r)
				}
			case mongo.IsDuplicateKeyError(err):
				outcomes["duplicate key error"]++
			default:
				t.Errorf("round %d racer %d: result %+v, error %v", r, i, res, err)
			}
		})

		var doc struct {
			CreatedBy int `bson:"created_by"`
		}
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
			t.Fatalf("round %d: FindOne: %v", r, err)
		}
		if winner == -1 || doc.CreatedBy != winner {
			t.Errorf("round %d: document created_by %d, winner %d", r, doc.CreatedBy, winner)
		}
	}
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != rounds {
		t.Errorf("CountDocuments = %d, %v; want %d", n, err, rounds)
	}
	t.Logf("outcomes over %d rounds of %d racers: %v", rounds, racers, outcomes)
}

func TestIncCounter(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("counters")
	id := bson.D{{Key: "_id", Value: "c"}}
	inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}

	// $inc with upsert creates the counter at 1.
	if _, err := coll.UpdateOne(ctx, id, inc, options.UpdateOne().SetUpsert(true)); err != nil {
		t.Fatalf("UpdateOne $inc upsert: %v", err)
	}
	var doc struct {
		N int64 `bson:"n"`
	}
	after := options.FindOneAndUpdate().SetReturnDocument(options.After)
	if err := coll.FindOneAndUpdate(ctx, id, inc, after).Decode(&doc); err != nil {
		t.Fatalf("FindOneAndUpdate $inc: %v", err)
	}
	if doc.N != 2 {
		t.Errorf("counter = %d, want 2", doc.N)
	}
	if err := coll.FindOneAndUpdate(ctx, id, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: -5}}}}, after).Decode(&doc); err != nil {
		t.Fatalf("FindOneAndUpdate $inc -5: %v", err)
	}
	if doc.N != -3 {
		t.Errorf("counter = %d, want -3", doc.N)
	}
}

// TestConcurrentInc: 10 goroutines each $inc a counter 10 times; the
// counter ends at 100 (login throttling counts on it). As for
// TestConditionalUpdateRace, the embedded server gets this right only
// because it runs one command at a time.
func TestConcurrentInc(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("counters")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "c"}, {Key: "n", Value: 0}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}

	const racers, each = 10, 10
	raceStart(racers, func(int) {
		for range each {
			if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "c"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}); err != nil {
				t.Errorf("$inc: %v", err)
				return
			}
		}
	})
	var doc struct {
		N int `bson:"n"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "c"}}).Decode(&doc); err != nil {
		t.Fatalf("FindOne: %v", err)
	}
	if doc.N != racers*each {
		t.Errorf("counter = %d after %d concurrent increments, want %d", doc.N, racers*each, racers*each)
	}
}

func TestFindByArrayElement(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("conversations")
	docs := []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "participants", Value: bson.A{"u1", "u2"}}},
		bson.D{{Key: "_id", Value: 2}, {Key: "participants", Value: bson.A{"u2", "u3"}}},
		bson.D{{Key: "_id", Value: 3}, {Key: "participants", Value: bson.A{"u3", "u1"}}},
		bson.D{{Key: "_id", Value: 4}, {Key: "participants", Value: "u1"}}, // a scalar matches too
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}
	if got := findIDs(t, coll, bson.D{{Key: "participants", Value: "u1"}}, nil); !slices.Equal(got, []int{1, 3, 4}) {
		t.Errorf("participants: u1 matched %v, want [1 3 4]", got)
	}
	if got := findIDs(t, coll, bson.D{{Key: "participants", Value: bson.D{{Key: "$all", Value: bson.A{"u1", "u3"}}}}}, nil); !slices.Equal(got, []int{3}) {
		t.Errorf("participants $all [u1 u3] matched %v, want [3]", got)
	}
}

// findIDs returns the int _ids that filter matches, sorted by _id unless
// opts sorts.
func findIDs(t *testing.T, coll *mongo.Collection, filter any, opts *options.FindOptionsBuilder) []int {
	t.Helper()
	if opts == nil {
		opts = options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
	}
	cur, err := coll.Find(t.Context(), filter, opts)
	if err != nil {
		t.Fatalf("Find %v: %v", filter, err)
	}
	var docs []struct {
		ID int `bson:"_id"`
	}
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatalf("Find %v: reading cursor: %v", filter, err)
	}
	ids := make([]int, 0, len(docs))
	for _, d := range docs {
		ids = append(ids, d.ID)
	}
	return ids
}

// TestKeysetPagination pages through an account's conversations newest
// first, with ties on updated_at broken by _id, the way list endpoints do.
func TestKeysetPagination(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("conversations")
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{
		{Key: "account_id", Value: 1}, {Key: "updated_at", Value: -1}, {Key: "_id", Value: -1},
	}}); err != nil {
		t.Fatalf("CreateOne: %v", err)
	}

	base := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(minutes int) time.Time { return base.Add(time.Duration(minutes) * time.Minute) }
	type conv struct {
		ID        int       `bson:"_id"`
		AccountID string    `bson:"account_id"`
		UpdatedAt time.Time `bson:"updated_at"`
	}
	// Ties at minutes 5 and 3; ids out of order with time on purpose.
	data := []conv{
		{1, "a", at(5)}, {2, "a", at(3)}, {3, "a", at(5)}, {4, "a", at(1)},
		{5, "a", at(3)}, {6, "a", at(9)}, {7, "a", at(5)}, {8, "b", at(4)}, {9, "b", at(7)},
	}
	docs := make([]any, len(data))
	for i, d := range data {
		docs[i] = d
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}
	want := []int{6, 7, 3, 1, 5, 2, 4} // updated_at desc, then _id desc

	sort := options.Find().SetSort(bson.D{{Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}}).SetLimit(2)
	var got []int
	filter := bson.D{{Key: "account_id", Value: "a"}}
	for page := 0; ; page++ {
		if page > len(want) {
			t.Fatalf("pagination does not end; got %v so far", got)
		}
		cur, err := coll.Find(ctx, filter, sort)
		if err != nil {
			t.Fatalf("Find page %d: %v", page, err)
		}
		var batch []conv
		if err := cur.All(ctx, &batch); err != nil {
			t.Fatalf("Find page %d: %v", page, err)
		}
		if len(batch) == 0 {
			break
		}
		if len(batch) > 2 {
			t.Fatalf("page %d has %d items, limit is 2", page, len(batch))
		}
		for _, c := range batch {
			got = append(got, c.ID)
		}
		last := batch[len(batch)-1]
		filter = bson.D{
			{Key: "account_id", Value: "a"},
			{Key: "$or", Value: bson.A{
				bson.D{{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: last.UpdatedAt}}}},
				bson.D{{Key: "updated_at", Value: last.UpdatedAt}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: last.ID}}}},
			}},
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages gave %v, want %v", got, want)
	}
}

func TestTimeRoundTripsAtMilliseconds(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("times")
	loc := time.FixedZone("UTC+2", 2*60*60)
	in := time.Date(2025, 6, 7, 8, 9, 10, 123456789, loc)
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "at", Value: in}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}
	var out struct {
		At time.Time `bson:"at"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: 1}}).Decode(&out); err != nil {
		t.Fatalf("FindOne: %v", err)
	}
	// BSON dates are milliseconds since the epoch: sub-millisecond digits
	// are dropped (truncated, not rounded) and the zone is not kept.
	if want := in.Truncate(time.Millisecond); !out.At.Equal(want) {
		t.Errorf("read back %v, want %v", out.At, want)
	}
	if out.At.Location() != time.UTC {
		t.Errorf("read back in %v, want UTC", out.At.Location())
	}
	// Equality on the truncated value finds it, the untruncated one does
	// not: compare times after Truncate(time.Millisecond).
	if n, err := coll.CountDocuments(ctx, bson.D{{Key: "at", Value: in.Truncate(time.Millisecond)}}); err != nil || n != 1 {
		t.Errorf("CountDocuments(at == truncated) = %d, %v; want 1", n, err)
	}
}

func TestIn(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("items")
	var docs []any
	for i := 1; i <= 6; i++ {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "status", Value: []string{"open", "closed", "archived"}[i%3]}})
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}
	if got := findIDs(t, coll, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{2, 4, 99}}}}}, nil); !slices.Equal(got, []int{2, 4}) {
		t.Errorf("_id $in matched %v, want [2 4]", got)
	}
	if got := findIDs(t, coll, bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{"open", "archived"}}}}}, nil); !slices.Equal(got, []int{2, 3, 5, 6}) {
		t.Errorf("status $in matched %v, want [2 3 5 6]", got)
	}
	if got := findIDs(t, coll, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{}}}}}, nil); len(got) != 0 {
		t.Errorf("$in [] matched %v, want nothing", got)
	}
}

func TestDeleteOneAndCountDocuments(t *testing.T) {
	ctx := t.Context()
	coll := mongotest.New(t).Collection("items")
	var docs []any
	for i := 1; i <= 5; i++ {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "account_id", Value: []string{"a", "b"}[i%2]}})
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}

	count := func(filter bson.D) int64 {
		t.Helper()
		n, err := coll.CountDocuments(ctx, filter)
		if err != nil {
			t.Fatalf("CountDocuments %v: %v", filter, err)
		}
		return n
	}
	if n := count(bson.D{}); n != 5 {
		t.Errorf("count all = %d, want 5", n)
	}
	if n := count(bson.D{{Key: "account_id", Value: "b"}}); n != 3 {
		t.Errorf("count account b = %d, want 3", n)
	}
	if n, err := coll.CountDocuments(ctx, bson.D{{Key: "account_id", Value: "b"}}, options.Count().SetLimit(2)); err != nil || n != 2 {
		t.Errorf("count with limit 2 = %d, %v; want 2", n, err)
	}

	res, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: 3}})
	if err != nil || res.DeletedCount != 1 {
		t.Fatalf("DeleteOne existing = %+v, %v; want 1 deleted", res, err)
	}
	res, err = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: 3}})
	if err != nil || res.DeletedCount != 0 {
		t.Errorf("DeleteOne missing = %+v, %v; want 0 deleted, no error", res, err)
	}
	if n := count(bson.D{{Key: "account_id", Value: "b"}}); n != 2 {
		t.Errorf("count account b after delete = %d, want 2", n)
	}
	if n, err := coll.EstimatedDocumentCount(ctx); err != nil || n != 4 {
		t.Errorf("EstimatedDocumentCount = %d, %v; want 4", n, err)
	}
}

// TestEmbeddedLacksTTLIndexes: MongoDB creates TTL indexes; FerretDB v1
// refuses expireAfterSeconds with NotImplemented (code 238). Code that needs
// expiry must not depend on TTL indexes alone in tests (e.g. also check the
// expiry time when reading).
func TestEmbeddedLacksTTLIndexes(t *testing.T) {
	db := mongotest.New(t)
	ferret := isFerretDB(t, db)
	coll := db.Collection("sessions")
	name, err := coll.Indexes().CreateOne(t.Context(), mongo.IndexModel{
		Keys:    bson.D{{Key: "expires_at", Value: 1}},
		Options: options.Index().SetExpireAfterSeconds(0),
	})
	if ferret {
		const notImplemented = 238
		if code := commandErrorCode(err); code != notImplemented {
			t.Fatalf("FerretDB: TTL index creation = %v (code %d), want NotImplemented (%d); has FerretDB learnt TTL?", err, code, notImplemented)
		}
		t.Logf("FerretDB refuses TTL indexes: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("TTL index creation: %v", err)
	}
	if spec := indexSpec(t, coll, name); spec.ExpireAfterSeconds == nil || *spec.ExpireAfterSeconds != 0 {
		t.Errorf("index %s expireAfterSeconds = %v, want 0", name, spec.ExpireAfterSeconds)
	}
}

// TestEmbeddedLacksTransactions: FerretDB has no multi-document
// transactions (it rejects the startTransaction field with FailedToParse,
// code 9), and neither has a standalone mongod such as the mongo:8
// container (only replica sets do). The failed transaction leaves no trace.
// Store code must not need transactions.
func TestEmbeddedLacksTransactions(t *testing.T) {
	ctx := t.Context()
	db := mongotest.New(t)
	ferret := isFerretDB(t, db)
	coll := db.Collection("items")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 0}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}
	sess, err := db.Client().StartSession()
	if err != nil {
		t.Fatalf("StartSession: %v", err)
	}
	defer sess.EndSession(context.Background())
	_, err = sess.WithTransaction(ctx, func(ctx context.Context) (any, error) {
		return coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	})
	switch {
	case err == nil && ferret:
		t.Fatal("FerretDB: transaction succeeded; has FerretDB learnt transactions?")
	case err == nil:
		// A replica set behind $MONGODB_URI does have transactions.
		t.Logf("transactions work on this server (a replica set)")
		return
	}
	t.Logf("FerretDB: %v; transaction error (code %d): %v", ferret, commandErrorCode(err), err)
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Errorf("after the failed transaction: %d documents, %v; want 1", n, err)
	}
}

// TestEmbeddedLacksChangeStreams: Watch fails on FerretDB (NotImplemented,
// 238), as on any standalone mongod.
func TestEmbeddedLacksChangeStreams(t *testing.T) {
	db := mongotest.New(t)
	ferret := isFerretDB(t, db)
	cs, err := db.Collection("items").Watch(t.Context(), mongo.Pipeline{})
	if err == nil {
		_ = cs.Close(context.Background())
		if ferret {
			t.Fatal("FerretDB: Watch succeeded; has FerretDB learnt change streams?")
		}
		t.Logf("change streams work on this server (a replica set)")
		return
	}
	if code := commandErrorCode(err); ferret && code != 238 {
		t.Errorf("FerretDB: Watch: got %v (code %d), want NotImplemented (238)", err, code)
	}
	t.Logf("FerretDB: %v; Watch error: %v", ferret, err)
}

// TestPingAfterStopFailsFast is what a service sees during a database
// outage: with a 2s server selection timeout, calls fail after about 2s.
func TestPingAfterStopFailsFast(t *testing.T) {
	ctx := t.Context()
	s, err := mongoproc.Start(ctx, mongoproc.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	const selection = 2 * time.Second
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()).SetServerSelectionTimeout(selection))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	if err := c.Ping(ctx, nil); err != nil {
		t.Fatalf("Ping while running: %v", err)
	}

	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	// The first call usually fails at once on its pooled connection, which
	// the server closed (a network error); if the driver's monitor noticed
	// the outage first, it waits for the server selection timeout instead.
	began := time.Now()
	err = c.Ping(ctx, nil)
	took := time.Since(began)
	if err == nil {
		t.Fatal("Ping after Stop: got nil error")
	}
	t.Logf("first Ping after Stop failed after %v (IsNetworkError=%v IsTimeout=%v): %v", took, mongo.IsNetworkError(err), mongo.IsTimeout(err), err)
	if !mongo.IsNetworkError(err) && !mongo.IsTimeout(err) {
		t.Errorf("first Ping after Stop: want a network or timeout error")
	}
	if took > selection+time.Second {
		t.Errorf("first Ping after Stop took %v, want at most about %v", took, selection)
	}

	// Later calls find no server: they fail after the server selection
	// timeout with a timeout error.
	began = time.Now()
	err = c.Database("x").Collection("y").FindOne(ctx, bson.D{}).Err()
	took = time.Since(began)
	if err == nil || errors.Is(err, mongo.ErrNoDocuments) {
		t.Fatalf("FindOne after Stop: got %v, want a server selection error", err)
	}
	t.Logf("FindOne after Stop failed after %v (IsNetworkError=%v IsTimeout=%v): %v", took, mongo.IsNetworkError(err), mongo.IsTimeout(err), err)
	if !mongo.IsTimeout(err) {
		t.Errorf("FindOne after Stop: want mongo.IsTimeout")
	}
	if took < selection-100*time.Millisecond || took > selection+time.Second {
		t.Errorf("FindOne after Stop took %v, want about %v", took, selection)
	}
}
