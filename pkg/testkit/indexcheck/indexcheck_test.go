package indexcheck

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/testkit/mongotest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

func raw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The rules of the package doc, one command each.
func TestServes(t *testing.T) {
	indexes := []index{
		idIndex,
		{name: "by_participant", keys: []key{{"account_id", 1}, {"participants", 1}, {"updated_at", -1}, {"_id", -1}}},
		{name: "by_key", keys: []key{{"account_id", 1}, {"caller", 1}, {"key", 1}}, unique: true},
		{name: "by_due", keys: []key{{"state", 1}, {"next_attempt_at", 1}}},
	}
	keyset := bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: 5}}}},
		bson.D{{Key: "updated_at", Value: 5}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: "x"}}}},
	}}
	newestFirst := bson.D{{Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}}
	for _, tc := range []struct {
		name string
		cmd  bson.D
		want bool
		why  string
	}{
		{"equality then sort then keyset", bson.D{{Key: "find", Value: "c"},
			{Key: "filter", Value: bson.D{{Key: "participants", Value: "u"}, {Key: "account_id", Value: "a"}, keyset}},
			{Key: "sort", Value: newestFirst}}, true, ""},
		{"the sort reversed", bson.D{{Key: "find", Value: "c"},
			{Key: "filter", Value: bson.D{{Key: "account_id", Value: "a"}, {Key: "participants", Value: bson.D{{Key: "$in", Value: bson.A{"u", "v"}}}}}},
			{Key: "sort", Value: bson.D{{Key: "updated_at", Value: 1}, {Key: "_id", Value: 1}}}}, true, ""},
		{"the sort half reversed", bson.D{{Key: "find", Value: "c"},
			{Key: "filter", Value: bson.D{{Key: "account_id", Value: "a"}, {Key: "participants", Value: "u"}}},
			{Key: "sort", Value: bson.D{{Key: "updated_at", Value: 1}, {Key: "_id", Value: -1}}}}, false, "{account_id: 1, participants: 1, updated_at: 1, _id: -1}"},
		{"an equality field the index lacks", bson.D{{Key: "find", Value: "c"},
			{Key: "filter", Value: bson.D{{Key: "account_id", Value: "a"}, {Key: "status", Value: "open"}}},
			{Key: "sort", Value: newestFirst}}, false, "{account_id: 1, status: 1, updated_at: -1, _id: -1}"},
		{"a range before the sort", bson.D{{Key: "find", Value: "c"},
			{Key: "filter", Value: bson.D{{Key: "account_id", Value: "a"}, {Key: "participants", Value: "u"}, {Key: "created_at", Value: bson.D{{Key: "$gt", Value: 1}}}}},
			{Key: "sort", Value: newestFirst}}, false, "created_at: 1}"},
		{"_id equality with anything", bson.D{{Key: "update", Value: "c"}, {Key: "updates", Value: bson.A{
			bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: "x"}, {Key: "version", Value: bson.D{{Key: "$exists", Value: false}}}}}, {Key: "u", Value: bson.D{}}},
		}}}, true, ""},
		{"a unique key pins one document", bson.D{{Key: "delete", Value: "c"}, {Key: "deletes", Value: bson.A{
			bson.D{{Key: "q", Value: bson.D{{Key: "account_id", Value: "a"}, {Key: "caller", Value: "u"}, {Key: "key", Value: "k"}, {Key: "created_at", Value: 1}}}, {Key: "limit", Value: 1}},
		}}}, true, ""},
		{"residual conditions only", bson.D{{Key: "find", Value: "c"},
			{Key: "filter", Value: bson.D{{Key: "failing_since", Value: bson.D{{Key: "$ne", Value: nil}}}}}}, false, "whole collection"},
		{"due range with a residual $nin", bson.D{{Key: "find", Value: "c"},
			{Key: "filter", Value: bson.D{{Key: "state", Value: "pending"}, {Key: "next_attempt_at", Value: bson.D{{Key: "$lte", Value: 1}}},
				{Key: "endpoint_id", Value: bson.D{{Key: "$nin", Value: bson.A{"e"}}}}}},
			{Key: "sort", Value: bson.D{{Key: "next_attempt_at", Value: 1}}}, {Key: "hint", Value: "by_due"}}, true, ""},
		{"a hint that does not serve", bson.D{{Key: "find", Value: "c"},
			{Key: "filter", Value: bson.D{{Key: "state", Value: "pending"}}}, {Key: "hint", Value: "by_participant"}}, false, "hints"},
		{"an aggregate's $match", bson.D{{Key: "aggregate", Value: "c"}, {Key: "pipeline", Value: bson.A{
			bson.D{{Key: "$match", Value: bson.D{{Key: "status", Value: "open"}}}}, bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: 1}}}},
		}}}, false, "{status: 1}"},
		{"a count of everything", bson.D{{Key: "count", Value: "c"}}, true, ""},
		{"findAndModify by its sort", bson.D{{Key: "findAndModify", Value: "c"},
			{Key: "query", Value: bson.D{{Key: "state", Value: "pending"}, {Key: "next_attempt_at", Value: bson.D{{Key: "$lte", Value: 1}}}}},
			{Key: "sort", Value: bson.D{{Key: "next_attempt_at", Value: 1}}}}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := raw(t, tc.cmd)
			qs := queriesOf(tc.cmd[0].Key, cmd)
			if len(qs) != 1 {
				t.Fatalf("%d queries", len(qs))
			}
			ok, why := serves(qs[0], indexes)
			if ok != tc.want || !strings.Contains(why, tc.why) {
				t.Fatalf("%s: served %v (%s), want %v (%q)", qs[0].shape(), ok, why, tc.want, tc.why)
			}
		})
	}
}

// New records what the driver sends to the database it returns, and the
// check reads the database's indexes: a query by the declared index
// passes, one without fails, named with what it lacks.
func TestRecordsAndChecksRealQueries(t *testing.T) {
	ctx := context.Background()
	plain := mongotest.New(t)
	rec := &recorder{}
	recorders.Store(plain.Name(), rec)
	defer recorders.Delete(plain.Name())
	db := watchingClient(t).Database(plain.Name())
	coll := db.Collection("things")
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "created_at", Value: -1}}, Options: options.Index().SetName("by_account"),
	}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "t1"}, {Key: "account_id", Value: "a"}, {Key: "created_at", Value: now}, {Key: "kind", Value: "x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.Find(ctx, bson.D{{Key: "account_id", Value: "a"}}, options.Find().SetSort(bson.D{{Key: "created_at", Value: -1}})); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "t1"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "kind", Value: "y"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.CountDocuments(ctx, bson.D{{Key: "kind", Value: "y"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.DeleteMany(ctx, bson.D{{Key: "created_at", Value: bson.D{{Key: "$lt", Value: now}}}}); err != nil {
		t.Fatal(err)
	}
	problems, err := check(ctx, plain, rec.all(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 2 || !strings.Contains(problems[0], "things: aggregate {kind: eq} is served by no index") ||
		!strings.Contains(problems[0], "{kind: 1}") || !strings.Contains(problems[1], "things: delete {created_at: range}") {
		t.Fatalf("problems:\n%s", strings.Join(problems, "\n"))
	}
	allowed, err := check(ctx, plain, rec.all(), []Allow{{Collection: "things", Shape: "aggregate {kind: eq}", Reason: "a test"}})
	if err != nil || len(allowed) != 1 {
		t.Fatalf("with an allowance: %v %v", allowed, err)
	}
}
