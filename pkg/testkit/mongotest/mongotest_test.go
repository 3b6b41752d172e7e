package mongotest_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/testkit/mongotest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// validName is what both MongoDB and FerretDB accept as a database name.
var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,63}$`)

func TestNewGivesFreshUniqueDatabases(t *testing.T) {
	ctx := t.Context()
	var names []string
	for i := range 3 {
		t.Run("sub test/with odd chars: ünïcode "+strings.Repeat("x", 80), func(t *testing.T) {
			db := mongotest.New(t)
			if !validName.MatchString(db.Name()) {
				t.Errorf("database name %q is not valid for MongoDB/FerretDB", db.Name())
			}
			if slices.Contains(names, db.Name()) {
				t.Errorf("database name %q handed out twice", db.Name())
			}
			names = append(names, db.Name())

			cols, err := db.ListCollectionNames(ctx, bson.D{})
			if err != nil {
				t.Fatalf("ListCollectionNames: %v", err)
			}
			if len(cols) != 0 {
				t.Errorf("fresh database %s has collections %v", db.Name(), cols)
			}
			if _, err := db.Collection("c").InsertOne(ctx, bson.D{{Key: "i", Value: i}}); err != nil {
				t.Fatalf("InsertOne: %v", err)
			}
		})
	}

	// Each subtest's cleanup has run: its database must be gone.
	all, err := mongotest.Client(t).ListDatabaseNames(ctx, bson.D{})
	if err != nil {
		t.Fatalf("ListDatabaseNames: %v", err)
	}
	for _, n := range names {
		if slices.Contains(all, n) {
			t.Errorf("database %s still exists after its test ended", n)
		}
	}
}

func TestURIReachesTheSharedServer(t *testing.T) {
	ctx := t.Context()
	db := mongotest.New(t)
	if _, err := db.Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}

	// A separate client on URI, as a binary started by a test would use it,
	// sees the same data.
	c, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI(t)).SetServerSelectionTimeout(5 * time.Second))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	n, err := c.Database(db.Name()).Collection("c").CountDocuments(ctx, bson.D{})
	if err != nil {
		t.Fatalf("CountDocuments: %v", err)
	}
	if n != 1 {
		t.Errorf("CountDocuments through URI = %d, want 1", n)
	}
}

func TestParallelTests(t *testing.T) {
	for i := range 4 {
		t.Run("p", func(t *testing.T) {
			t.Parallel()
			db := mongotest.New(t)
			if _, err := db.Collection("c").InsertOne(t.Context(), bson.D{{Key: "i", Value: i}}); err != nil {
				t.Fatalf("InsertOne: %v", err)
			}
			n, err := db.Collection("c").CountDocuments(t.Context(), bson.D{})
			if err != nil {
				t.Fatalf("CountDocuments: %v", err)
			}
			if n != 1 {
				t.Errorf("CountDocuments = %d, want 1: databases are not isolated", n)
			}
		})
	}
}
