package embeddedmongo_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/testkit/embeddedmongo"
)

// start starts a server on dir and stops it at the end of the test.
func start(t *testing.T, opts embeddedmongo.Options) *embeddedmongo.Server {
	t.Helper()
	began := time.Now()
	s, err := embeddedmongo.Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("started %s in %v", s.URI(), time.Since(began))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

// connect returns a client whose calls against a stopped server fail in
// seconds instead of the driver's default 30s, which the stop and restart
// tests want. Its short server selection timeout also bounds the wait for
// a pooled connection: tests that load the server use connectPatient.
func connect(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	return connectWith(t, options.Client().ApplyURI(uri).SetServerSelectionTimeout(2*time.Second))
}

// connectPatient returns a client without a server selection timeout:
// server selection and the wait for a pooled connection end only with the
// caller's context (see untilTestDeadline), so a loaded machine makes the
// test slower, never wrong.
func connectPatient(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	return connectWith(t, options.Client().ApplyURI(uri).SetServerSelectionTimeout(0))
}

// untilTestDeadline is the test's context, cut shortly before the test
// binary's own -timeout so that a hung call fails with its error rather
// than a panic.
func untilTestDeadline(t *testing.T) context.Context {
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		t.Cleanup(cancel)
	}
	return ctx
}

func connectWith(t *testing.T, opts *options.ClientOptions) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(opts)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

func TestStartRequiresDir(t *testing.T) {
	if _, err := embeddedmongo.Start(t.Context(), embeddedmongo.Options{}); err == nil {
		t.Fatal("Start without Dir: got nil error")
	}
}

func TestStartCreatesDirAndServes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "data")
	s := start(t, embeddedmongo.Options{Dir: dir})

	if got := s.URI(); got != "mongodb://"+s.Addr()+"/" {
		t.Errorf("URI() = %q, want mongodb://%s/", got, s.Addr())
	}
	c := connect(t, s.URI())
	if err := c.Ping(t.Context(), nil); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// TestRestartKeepsData is the outage scenario: stop the server, start it
// again on the same folder and address, and find the data again, through
// the same client, which reconnects by itself.
func TestRestartKeepsData(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()

	first, err := embeddedmongo.Start(ctx, embeddedmongo.Options{Dir: dir})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	addr := first.Addr()
	c := connect(t, first.URI())
	coll := c.Database("restart").Collection("docs")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 42}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}

	began := time.Now()
	if err := first.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("Stop with a connected client took %v", time.Since(began))
	if err := first.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	// While the server is down the client fails within its server selection
	// timeout.
	began = time.Now()
	err = c.Ping(ctx, nil)
	if err == nil {
		t.Fatal("Ping while stopped: got nil error")
	}
	t.Logf("Ping while stopped failed after %v: %v", time.Since(began), err)

	second := start(t, embeddedmongo.Options{Dir: dir, Addr: addr})
	if second.Addr() != addr {
		t.Fatalf("restarted on %s, want %s", second.Addr(), addr)
	}

	var got struct {
		ID string `bson:"_id"`
		N  int    `bson:"n"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got); err != nil {
		t.Fatalf("FindOne after restart (same client): %v", err)
	}
	if got.ID != "a" || got.N != 42 {
		t.Errorf("after restart got %+v, want {a 42}", got)
	}

	// A fresh client sees the same data.
	n, err := connect(t, second.URI()).Database("restart").Collection("docs").CountDocuments(ctx, bson.D{})
	if err != nil {
		t.Fatalf("CountDocuments: %v", err)
	}
	if n != 1 {
		t.Errorf("CountDocuments = %d, want 1", n)
	}
	// Hang up now, so the deferred Stop need not wait for these clients.
	_ = c.Disconnect(ctx)
}

func TestStartOnBusyAddrFails(t *testing.T) {
	s := start(t, embeddedmongo.Options{Dir: t.TempDir()})
	_, err := embeddedmongo.Start(t.Context(), embeddedmongo.Options{Dir: t.TempDir(), Addr: s.Addr()})
	if err == nil {
		t.Fatal("Start on an address in use: got nil error")
	}
	t.Logf("error: %v", err)
	// FerretDB panics from a finalizer if a failed start leaked its SQLite
	// backend; make the garbage collector look now.
	runtime.GC()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
}

// TestStopClosesClientConnections: Stop does not wait for connected clients
// (FerretDB alone gives them up to 3s): it closes their connections.
func TestStopClosesClientConnections(t *testing.T) {
	s := start(t, embeddedmongo.Options{Dir: t.TempDir()})
	c := connect(t, s.URI())
	if err := c.Ping(t.Context(), nil); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	began := time.Now()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop with a connected client: %v", err)
	}
	t.Logf("Stop with a connected client took %v", time.Since(began))
	if err := c.Ping(t.Context(), nil); err == nil {
		t.Error("Ping after Stop: got nil error")
	}
}

// TestConcurrentUpdatesAreAtomic: commands are serialised, so of 10
// concurrent conditional updates of one document exactly one wins, and 100
// concurrent $inc all count, as on MongoDB. (FerretDB on its own lets
// several racers win and loses increments.)
func TestConcurrentUpdatesAreAtomic(t *testing.T) {
	ctx := untilTestDeadline(t)
	s := start(t, embeddedmongo.Options{Dir: t.TempDir()})
	// 100 racers queue for the serialised server and for the pool's
	// connections, which open two at a time: however long that takes on a
	// loaded machine, every update must count.
	coll := connectPatient(t, s.URI()).Database("atomic").Collection("docs")

	race := func(n int, f func(i int)) {
		var wg sync.WaitGroup
		ready := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-ready
				f(i)
			})
		}
		close(ready)
		wg.Wait()
	}

	const rounds, racers = 10, 10
	for r := range rounds {
		id := fmt.Sprint("tok", r)
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "used", Value: false}}); err != nil {
			t.Fatalf("InsertOne: %v", err)
		}
		var winners atomic.Int32
		race(racers, func(i int) {
			err := coll.FindOneAndUpdate(ctx,
				bson.D{{Key: "_id", Value: id}, {Key: "used", Value: false}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "used", Value: true}, {Key: "used_by", Value: i}}}},
			).Err()
			switch {
			case err == nil:
				winners.Add(1)
			case !errors.Is(err, mongo.ErrNoDocuments):
				t.Errorf("round %d racer %d: %v", r, i, err)
			}
		})
		if n := winners.Load(); n != 1 {
			t.Errorf("round %d: %d of %d racers consumed the token, want exactly 1", r, n, racers)
		}
	}

	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "counter"}, {Key: "n", Value: 0}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}
	const incs = 100
	race(incs, func(int) {
		if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "counter"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}); err != nil {
			t.Errorf("$inc: %v", err)
		}
	})
	var doc struct {
		N int `bson:"n"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "counter"}}).Decode(&doc); err != nil {
		t.Fatalf("FindOne: %v", err)
	}
	if doc.N != incs {
		t.Errorf("counter = %d after %d concurrent $inc, want %d", doc.N, incs, incs)
	}
}

// TestIdle: the server knows whether a client is connected and since when
// none is, which is what the embeddedmongo command exits on.
func TestIdle(t *testing.T) {
	s := start(t, embeddedmongo.Options{Dir: t.TempDir()})
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if err := c.Ping(t.Context(), nil); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if idle, _ := s.Idle(); idle {
		t.Error("Idle() = true with a client connected")
	}
	disconnected := time.Now()
	if err := c.Disconnect(t.Context()); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	// The server notices the closed connections a moment later: however
	// long a loaded machine takes, the test's own deadline bounds it.
	ctx := untilTestDeadline(t)
	for ; ; time.Sleep(10 * time.Millisecond) {
		idle, since := s.Idle()
		if idle {
			if since.Before(disconnected) {
				t.Errorf("idle since %v, before the client disconnected at %v", since, disconnected)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("Idle() still false %v after the client disconnected", time.Since(disconnected))
		}
	}
}
