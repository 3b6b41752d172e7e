// Package indexcheck fails a test whose code sends MongoDB a query that no
// index of the database serves. The embedded store scans every filter but
// _id, so a missing index never shows in a test's time there; this check
// shows it on every server.
//
//	db := indexcheck.New(t) // a mongotest.New database whose queries are checked
//
// When the test ends, every find, aggregate (its first stage's $match and
// a $sort after it), update, delete, findAndModify, count and distinct
// sent to db is checked against the indexes the database has then
// (listIndexes: what the store's own EnsureIndexes declared). A query is
// served when:
//
//   - an equality on every key of a unique index pins it to one document:
//     _id alone, or a unique key such as {account_id, caller, key}; or
//   - one index starts with its equality fields (in any order), then its
//     sort fields in order (or all reversed), then its range fields (in
//     any order); a hint names the one index that may.
//
// Equality is a value, $eq or $in; a range is $gt, $gte, $lt or $lte. The
// fields of a $or count as range fields (a keyset position is such a $or
// on the sort fields); $and merges its members. $ne, $nin, $exists, $not,
// $regex and the other operators bound nothing: they are checked on the
// documents the index finds and need no key, but a query of only such
// conditions (or none), with no sort, reads the whole collection and
// fails, except a count of everything. Each failure names the collection,
// the query's shape (fields and classes, sort, hint), why, and the key
// pattern of the index it lacks.
//
// A query that needs no index (a purge over a small collection, say) is
// let through by an Allow that names its collection and shape and says
// why.
package indexcheck

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
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/testkit/mongotest"
)

// Allow lets one query shape through: Collection and Shape as a failure
// prints them ("find {status: eq}"), and Reason, required, says why it
// needs no index.
type Allow struct {
	Collection, Shape, Reason string
}

// New returns a fresh database (see mongotest.New) on a client whose
// commands are recorded, and checks them when the test ends, failing it
// for each query shape no index serves.
func New(t testing.TB, allow ...Allow) *mongo.Database {
	t.Helper()
	for _, a := range allow {
		if strings.TrimSpace(a.Reason) == "" {
			t.Fatalf("indexcheck: the allowed %s %q has no reason", a.Collection, a.Shape)
		}
	}
	plain := mongotest.New(t) // registers the drop, which runs after the check below
	client := watchingClient(t)
	rec := &recorder{}
	recorders.Store(plain.Name(), rec)
	t.Cleanup(func() {
		recorders.Delete(plain.Name())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		problems, err := check(ctx, plain, rec.all(), allow)
		if err != nil {
			t.Errorf("indexcheck: %v", err)
		}
		for _, p := range problems {
			t.Errorf("indexcheck: %s", p)
		}
	})
	return client.Database(plain.Name())
}

// recorder holds the queries sent to one database.
type recorder struct {
	mu      sync.Mutex
	queries []query
}

func (r *recorder) add(qs []query) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queries = append(r.queries, qs...)
}

func (r *recorder) all() []query {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.queries)
}

var (
	// recorders maps a database's name to its recorder.
	recorders sync.Map

	clientOnce sync.Once
	client     *mongo.Client
	clientErr  error
)

// watchingClient is the test binary's client that records commands, on
// the server mongotest gives; it lives as long as the binary.
func watchingClient(t testing.TB) *mongo.Client {
	t.Helper()
	uri := mongotest.URI(t)
	clientOnce.Do(func() {
		monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if r, ok := recorders.Load(e.DatabaseName); ok {
				r.(*recorder).add(queriesOf(e.CommandName, e.Command))
			}
		}}
		client, clientErr = mongo.Connect(options.Client().ApplyURI(uri).
			SetMonitor(monitor).SetServerSelectionTimeout(2 * time.Minute))
	})
	if clientErr != nil {
		t.Fatalf("indexcheck: %v", clientErr)
	}
	return client
}

// check returns a description of each query shape of qs that the indexes
// of db do not serve.
func check(ctx context.Context, db *mongo.Database, qs []query, allow []Allow) ([]string, error) {
	indexes := map[string][]index{}
	seen := map[string]bool{}
	var problems []string
	for _, q := range qs {
		id := q.collection + ": " + q.shape()
		if seen[id] {
			continue
		}
		seen[id] = true
		if slices.ContainsFunc(allow, func(a Allow) bool { return a.Collection == q.collection && a.Shape == q.shape() }) {
			continue
		}
		ixs, ok := indexes[q.collection]
		if !ok {
			var err error
			if ixs, err = listIndexes(ctx, db.Collection(q.collection)); err != nil {
				return problems, err
			}
			indexes[q.collection] = ixs
		}
		if ok, why := serves(q, ixs); !ok {
			problems = append(problems, fmt.Sprintf("%s is served by no index: %s; the collection has %s", id, why, describe(ixs)))
		}
	}
	return problems, nil
}

// listIndexes reads a collection's indexes; a collection that does not
// exist has none.
func listIndexes(ctx context.Context, coll *mongo.Collection) ([]index, error) {
	cur, err := coll.Indexes().List(ctx)
	var ce mongo.CommandError
	if errors.As(err, &ce) && ce.Code == 26 { // NamespaceNotFound
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the indexes of %s: %w", coll.Name(), err)
	}
	var docs []struct {
		Name   string   `bson:"name"`
		Key    bson.Raw `bson:"key"`
		Unique bool     `bson:"unique"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("list the indexes of %s: %w", coll.Name(), err)
	}
	out := make([]index, len(docs))
	for i, d := range docs {
		out[i] = index{name: d.Name, keys: keysOf(d.Key), unique: d.Unique || d.Name == idIndex.name}
	}
	return out, nil
}

func describe(ixs []index) string {
	if len(ixs) == 0 {
		return "no index but _id"
	}
	parts := make([]string, len(ixs))
	for i, ix := range ixs {
		parts[i] = ix.name + " " + pattern(ix.keys)
	}
	return strings.Join(parts, ", ")
}
