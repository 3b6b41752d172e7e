package embeddedmongo_test

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/embeddedmongo"
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

func connect(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	// A short server selection timeout makes calls against a stopped
	// server fail in seconds instead of the driver's default 30s.
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(2 * time.Second))
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

func TestStopHonoursContext(t *testing.T) {
	s := start(t, embeddedmongo.Options{Dir: t.TempDir()})
	c := connect(t, s.URI())
	if err := c.Ping(t.Context(), nil); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// With a client still connected FerretDB waits up to 3s for it, longer
	// than this deadline. (The cleanup registered by start waits for real.)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	err := s.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop with a 10ms deadline and a connected client = %v, want context.DeadlineExceeded", err)
	}
}
