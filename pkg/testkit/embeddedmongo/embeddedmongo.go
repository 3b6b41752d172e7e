// Package embeddedmongo runs a MongoDB-compatible server inside the current
// process: FerretDB v1 (https://www.ferretdb.com) with its SQLite backend,
// speaking the MongoDB wire protocol on a local TCP port.
//
// It exists because developer machines (and some CI runners) have neither
// MongoDB nor a Docker engine, yet store tests and the local dev stack need
// a real wire-protocol server that the official driver can talk to. It is
// meant for tests and for the local dev stack only; never import it from a
// production binary: it pulls in FerretDB, SQLite (pure Go,
// modernc.org/sqlite) and their dependencies, whose compilation and linking
// dominate a build. For that reason tests do not import it either: they run
// it as a process of its own, the embeddedmongo command
// (pkg/testkit/cmd/embeddedmongo, built without -race), through package
// mongoproc (package mongotest does that for them). The dev stack (make
// run), built once without -race, runs it in-process.
//
// Data lives in Options.Dir, one SQLite file per database, so a server can be
// stopped and started again on the same folder and finds its data again; this
// is how tests simulate a database outage (mongoproc.Start and
// Process.Stop). Only one server may use a folder at a time.
//
// # Commands are serialised
//
// FerretDB v1 executes an update as a read, then a write, with no isolation
// between concurrent requests: on its own, concurrent $inc lose increments
// and a conditional FindOneAndUpdate ({_id, used: false}) succeeds for
// several racers. Our code relies on single-document updates being atomic,
// as MongoDB guarantees (refresh-token reuse detection, key rotation, login
// throttling), and its tests must be able to prove that exactly one of N
// concurrent conditional updates wins.
//
// So the server executes one command at a time. FerretDB listens on a
// private loopback port; URI and Addr are those of a small wire-protocol
// proxy in front of it (pkg/testkit/internal/wireproxy), which forwards
// each client connection over a connection of its own to FerretDB and
// holds one server-wide lock from the moment a request has been read in
// full until its reply has been forwarded.
// Every command therefore runs alone, which makes each single-document
// write atomic like on MongoDB (even a multi-document updateMany runs
// without interleaving, which MongoDB does not promise: do not rely on it).
// The price is concurrency: parallel clients queue for the server, and a
// command that waits inside the server (getMore on a tailable awaitData
// cursor, for up to its maxTimeMS) holds up everybody meanwhile; the
// benchmarks in proxy_test.go measure it (figures in docs/decisions.md).
//
// Known limits that matter to our code:
//   - no multi-document transactions (nor change streams): it is a
//     standalone server, not a replica set;
//   - only a filter that is exactly {_id: value}, with a string or ObjectID
//     value, uses an index; any other filter, and every sort, is evaluated by scanning the collection in Go
//     (secondary indexes are created, and unique ones enforced, but they do
//     not speed up queries), so keep test data small;
//   - TTL and partial indexes are refused (NotImplemented); updates that
//     violate a unique index fail with InternalError, not E11000.
//
// The tests of package mongotest (capabilities_test.go) prove what works and
// pin down these differences; rely only on what is proven there.
package embeddedmongo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/testkit/internal/wireproxy"
)

// DefaultAddr is the listen address used when Options.Addr is empty: a free
// port on the loopback interface, so parallel test binaries never collide.
const DefaultAddr = "127.0.0.1:0"

// defaultStartTimeout bounds Start when its context has no deadline, so a
// server that never answers fails the caller instead of hanging it.
const defaultStartTimeout = 30 * time.Second

// Options configure Start.
type Options struct {
	// Dir is the folder holding the SQLite files (one per database). It is
	// created if missing. Required.
	Dir string

	// Addr is the TCP listen address, host:port. Default DefaultAddr.
	// To restart a stopped server where clients expect it, pass the
	// previous server's Addr().
	Addr string

	// Logger receives FerretDB's own logs. Default: discard them, because
	// FerretDB logs every connection at Info level, which drowns test output.
	Logger *slog.Logger
}

// Server is a running embedded server. Stop it with Stop.
type Server struct {
	uri  string
	addr string // the proxy's, which clients use

	proxy       *wireproxy.Proxy
	backendAddr string // FerretDB's own listener, behind the proxy

	cancel context.CancelFunc // stops FerretDB's Run
	done   chan struct{}      // closed when Run has returned
}

// backendListenAddr is where FerretDB itself listens: a free loopback port,
// reached only through the proxy.
const backendListenAddr = "127.0.0.1:0"

// newMu serializes ferretdb.New, which writes package-level state of
// FerretDB (its version info) and would otherwise race when tests start
// several servers in parallel.
var newMu sync.Mutex

// Start starts a server on opts.Dir and returns once it answers a ping, so
// the caller can use URI immediately. ctx bounds the start only (default 30s
// when it has no deadline); the server runs until Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("embeddedmongo: Options.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("embeddedmongo: resolving data folder %q: %w", opts.Dir, err)
	}
	// FerretDB refuses a folder that does not exist.
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embeddedmongo: creating data folder: %w", err)
	}
	addr := opts.Addr
	if addr == "" {
		addr = DefaultAddr
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	// Bind the client-facing address first, so a busy address fails
	// cleanly before FerretDB exists. (FerretDB v1.24 does not close its
	// SQLite backend when it cannot listen, and its leak detector then
	// panics the whole process once the garbage collector finds the
	// backend; its own listener is on a free loopback port, which does not
	// fail that way.)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("embeddedmongo: cannot listen on %s: %w", addr, err)
	}

	// FerretDB wants a "file:" URI naming a folder, with a trailing slash.
	// Building it with net/url escapes unusual characters in the path.
	// synchronous(off): SQLite never waits for the disk (FerretDB's
	// default, full, syncs its log at every commit, which cost an eighth of
	// the server's CPU and a quarter of a store test's time). A server that
	// is killed loses nothing, the writes are in the operating system's
	// hands; only a crash of the machine can lose or corrupt recent writes,
	// which a test and development store can afford.
	sqliteURL := (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir) + "/", RawQuery: "_pragma=synchronous(off)"}).String()

	newMu.Lock()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: backendListenAddr},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: sqliteURL,
	})
	newMu.Unlock()
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("embeddedmongo: creating FerretDB (data %s): %w", dir, err)
	}

	// Run must not depend on Start's ctx: that one only bounds the start.
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Run always returns nil in FerretDB v1; it returns once the
		// listener, all connections and the SQLite backend are closed.
		_ = f.Run(runCtx)
	}()

	// MongoDBURI must be called after Run has started (see its doc); with
	// a TCP listener it waits until the port is bound.
	backendURI := f.MongoDBURI()
	u, err := url.Parse(backendURI)
	if err != nil {
		_ = ln.Close()
		cancel()
		<-done
		return nil, fmt.Errorf("embeddedmongo: parsing FerretDB URI %q: %w", backendURI, err)
	}

	s := &Server{
		uri:         (&url.URL{Scheme: "mongodb", Host: ln.Addr().String(), Path: "/"}).String(),
		addr:        ln.Addr().String(),
		proxy:       wireproxy.New(ln, u.Host),
		backendAddr: u.Host,
		cancel:      cancel,
		done:        done,
	}
	s.proxy.Serve()

	if err := s.waitReady(ctx); err != nil {
		<-s.proxy.Close()
		cancel()
		<-done
		return nil, fmt.Errorf("embeddedmongo: server on %s did not become ready: %w", s.addr, err)
	}
	return s, nil
}

// waitReady pings the server with the real driver: a bound port is not
// enough, the handshake must work and the SQLite backend must answer.
func (s *Server) waitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	// The server selection timeout is a backstop; ctx is the real bound.
	client, err := mongo.Connect(options.Client().ApplyURI(s.uri).
		SetServerSelectionTimeout(defaultStartTimeout).
		SetMaxPoolSize(1))
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	defer func() {
		// Disconnect closes the probe's connections now instead of leaving
		// them to the garbage collector.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = client.Disconnect(dctx)
	}()
	if err := client.Ping(ctx, nil); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// URI returns the connection string, mongodb://host:port/.
func (s *Server) URI() string { return s.uri }

// Addr returns the host:port the server listens on; pass it as Options.Addr
// to restart on the same address after Stop.
func (s *Server) Addr() string { return s.addr }

// Idle reports whether no client is connected and, if so, since when: the
// moment the last client connection closed, or the start. The embeddedmongo
// command uses it to exit once its clients have gone.
func (s *Server) Idle() (idle bool, since time.Time) { return s.proxy.Idle() }

// Stop closes the listener and all client connections, waits for FerretDB
// to shut down and closes the SQLite files, so that Start on the same Dir
// and Addr works again. It returns ctx's error if the shutdown outlasts ctx
// (the shutdown then completes in the background). Stop may be called more
// than once.
//
// Clients see their connections closed at once, so a command in progress
// fails with a network error.
func (s *Server) Stop(ctx context.Context) error {
	// Closing the proxy closes FerretDB's connections too, so FerretDB
	// need not wait for them (it gives open connections up to 3s).
	proxyDone := s.proxy.Close()
	s.cancel()
	for _, ch := range []<-chan struct{}{proxyDone, s.done} {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("embeddedmongo: waiting for server on %s to stop: %w", s.addr, context.Cause(ctx))
		}
	}
	return nil
}
