// Package mongotest gives each test its own fresh MongoDB database on a
// server shared by the whole test binary.
//
// Every package whose tests use it must route TestMain through Main, so the
// shared server is released (and a container removed) once all tests ran;
// New fails the test when Main is missing:
//
//	func TestMain(m *testing.M) { mongotest.Main(m) }
//
// and then, in a test:
//
//	db := mongotest.New(t) // uniquely named, dropped when the test ends
//
// The server is obtained lazily by the first test that asks for it, the
// first of these that works:
//  1. the server at $MONGODB_URI, when set (CI, or your own mongod);
//  2. a mongo:8 container, when a Docker engine answers (if the container
//     cannot start, the embedded server is used and the test log says why);
//  3. the embedded FerretDB on SQLite (package embeddedmongo), run as a
//     process of its own and shared by all test binaries of the run
//     (package mongoproc): built once without -race, started by the first
//     test binary that needs it, reached over the wire like a real MongoDB,
//     and gone a few seconds after the last one has finished. This is what
//     runs on machines without either; test binaries never link FerretDB.
//
// When no server can be obtained, the test fails: it never skips, because a
// skipped store test looks like a passing one.
//
// The embedded server is not MongoDB: no multi-document transactions, no
// TTL or partial indexes (see package embeddedmongo). It runs one command at
// a time, so single-document updates are atomic there as on MongoDB, and
// tests of concurrent conditional updates prove something on all three
// servers. capabilities_test.go in this package proves what store code may
// rely on; keep to that so tests pass on all three servers.
package mongotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/testkit/mongoproc"
)

// EnvURI names the environment variable that points the tests at an
// existing server instead of starting one.
const EnvURI = "MONGODB_URI"

const (
	// The image used when Docker is available; keep the major version in
	// step with production.
	dockerRepository = "mongo"
	dockerTag        = "8"
	// containerLabel marks our containers, so leftovers of a killed test
	// binary can be found: docker rm -f $(docker ps -aq --filter label=mongotest)
	containerLabel = "mongotest"

	// dockerPingTimeout bounds the probe for a Docker engine, which costs
	// every test binary on machines without one.
	dockerPingTimeout = 2 * time.Second
	// containerMaxWait covers pulling the image on first use.
	containerMaxWait = 3 * time.Minute
	// startTimeout bounds reaching a server.
	startTimeout = time.Minute
	// embeddedStartTimeout bounds obtaining the embedded server, which
	// includes building its command: minutes on a cold build cache.
	embeddedStartTimeout = 10 * time.Minute
	// serverSelectionTimeout is also how long an operation waits for a
	// pooled connection (the driver bounds both by it). The shared server
	// never goes away while tests run, but on a loaded machine (two make
	// test side by side) the embedded store, which answers one command at
	// a time, can keep a burst of parallel subtests waiting for a
	// connection for many seconds: a short bound would turn a slow machine
	// into failed tests.
	serverSelectionTimeout = 2 * time.Minute
	// cleanupTimeout bounds dropping a database and stopping the server.
	cleanupTimeout = 30 * time.Second
)

// server is the shared server of the test binary.
type server struct {
	uri    string
	client *mongo.Client
	// desc says which server this is, for the test log.
	desc string
	// stop releases what start acquired (a container, a lease on the
	// embedded server); nil for $MONGODB_URI.
	stop func(context.Context) error
}

var (
	mainCalled atomic.Bool

	startOnce sync.Once
	shared    *server
	startErr  error
)

// Main runs the tests of m, then stops or releases the shared server if one
// was obtained, and exits. Call it from TestMain; a failure to clean up
// fails the binary.
func Main(m interface{ Run() int }) {
	mainCalled.Store(true)
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "mongotest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// New returns a new, empty database with a unique name on the shared server,
// dropped when the test and its subtests have finished. It is safe for
// parallel tests.
func New(t testing.TB) *mongo.Database {
	t.Helper()
	s := get(t)
	name := databaseName(t.Name())
	db := s.client.Database(name)
	t.Cleanup(func() {
		// t.Context() is already canceled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			t.Errorf("mongotest: dropping database %s: %v", name, err)
		}
	})
	return db
}

// Client returns the client connected to the shared server. Do not
// disconnect it; it is shared by all tests of the binary.
func Client(t testing.TB) *mongo.Client {
	t.Helper()
	return get(t).client
}

// URI returns the connection string of the shared server, for tests that
// start whole binaries. Pair it with a database name from New.
func URI(t testing.TB) string {
	t.Helper()
	return get(t).uri
}

// get returns the shared server, starting it on first use.
func get(t testing.TB) *server {
	t.Helper()
	if !mainCalled.Load() {
		// Without Main nobody stops the server: containers would leak.
		t.Fatal("mongotest: add func TestMain(m *testing.M) { mongotest.Main(m) } to this package's tests")
	}
	var took time.Duration
	startOnce.Do(func() {
		began := time.Now()
		shared, startErr = start()
		took = time.Since(began)
	})
	if startErr != nil {
		t.Fatalf("mongotest: no MongoDB server: %v", startErr)
	}
	if took > 0 {
		t.Logf("mongotest: using %s (ready in %v)", shared.desc, took.Round(time.Millisecond))
	}
	return shared
}

// start obtains a server, in the order given in the package doc.
func start() (*server, error) {
	if uri := os.Getenv(EnvURI); uri != "" {
		s, err := connect(uri, "$"+EnvURI)
		if err != nil {
			return nil, fmt.Errorf("$%s is set: %w", EnvURI, err)
		}
		return s, nil
	}

	s, err := startContainer()
	if err == nil {
		return s, nil
	}
	var dockerNote string
	if !errors.Is(err, errNoDocker) {
		// Docker answers but the container failed (offline, no disk...);
		// the embedded server still lets the tests run. Say so in the log.
		dockerNote = fmt.Sprintf(" (Docker is available but %v)", err)
	}

	s, err = startEmbedded()
	if err != nil {
		return nil, fmt.Errorf("starting embedded server%s: %w", dockerNote, err)
	}
	s.desc += dockerNote
	return s, nil
}

// shutdown disconnects the client and stops or releases the shared
// server, if any.
func shutdown() error {
	if shared == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	// Disconnect first, then release the embedded server: it exits
	// once no client is connected.
	err := shared.client.Disconnect(ctx)
	if err != nil {
		err = fmt.Errorf("disconnecting from %s: %w", shared.desc, err)
	}
	if shared.stop != nil {
		if serr := shared.stop(ctx); serr != nil {
			err = errors.Join(err, fmt.Errorf("stopping %s: %w", shared.desc, serr))
		}
	}
	shared = nil
	return err
}

// connect connects to uri and pings it, so tests start against a server
// known to answer.
func connect(uri, desc string) (*server, error) {
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(serverSelectionTimeout))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", desc, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := client.Ping(ctx, nil); err != nil {
		_ = client.Disconnect(ctx)
		return nil, fmt.Errorf("pinging %s: %w", desc, err)
	}
	return &server{uri: uri, client: client, desc: desc}, nil
}

// errNoDocker means no Docker engine answered; it is the normal case on
// machines without Docker and not worth reporting.
var errNoDocker = errors.New("no Docker engine")

// startContainer runs a mongo container and waits until it answers.
func startContainer() (*server, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoDocker, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerPingTimeout)
	defer cancel()
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoDocker, err)
	}

	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: dockerRepository,
		Tag:        dockerTag,
		Labels:     map[string]string{containerLabel: "true"},
	}, func(hc *docker.HostConfig) {
		// Remove the container as soon as it stops, whoever stops it.
		hc.AutoRemove = true
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return nil, fmt.Errorf("running %s:%s container: %w", dockerRepository, dockerTag, err)
	}
	purge := func(context.Context) error {
		if err := pool.Purge(res); err != nil {
			return fmt.Errorf("removing container %s: %w", res.Container.ID, err)
		}
		return nil
	}

	uri := "mongodb://" + containerAddr(res.GetHostPort("27017/tcp")) + "/"
	desc := fmt.Sprintf("%s:%s container %.12s at %s", dockerRepository, dockerTag, res.Container.ID, uri)
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(serverSelectionTimeout))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("connecting to %s: %w", desc, err), purge(context.Background()))
	}
	pool.MaxWait = containerMaxWait
	err = pool.Retry(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return client.Ping(ctx, nil)
	})
	if err != nil {
		_ = client.Disconnect(context.Background())
		return nil, errors.Join(fmt.Errorf("waiting for %s: %w", desc, err), purge(context.Background()))
	}
	return &server{uri: uri, client: client, desc: desc, stop: purge}, nil
}

// containerAddr returns the address where the container's published port is
// reachable: dockertest reports localhost, which is wrong when DOCKER_HOST
// points at a remote engine.
func containerAddr(hostPort string) string {
	u, err := url.Parse(os.Getenv("DOCKER_HOST"))
	if err != nil || u.Scheme != "tcp" || u.Hostname() == "" {
		return hostPort
	}
	_, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return hostPort
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// startEmbedded leases the embedded server shared by the run's test
// binaries, starting it if none runs.
func startEmbedded() (*server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), embeddedStartTimeout)
	defer cancel()
	lease, err := mongoproc.Acquire(ctx, "")
	if err != nil {
		return nil, err
	}
	s, err := connect(lease.URI(), fmt.Sprintf("embedded FerretDB at %s (process %d, shared by the run's test binaries)", lease.URI(), lease.PID()))
	if err != nil {
		return nil, errors.Join(err, lease.Release())
	}
	s.stop = func(context.Context) error { return lease.Release() }
	return s, nil
}

// databaseName returns a unique database name derived from the test name.
// The random suffix keeps names unique across test binaries sharing one
// server ($MONGODB_URI), which go test runs in parallel. Names stay within
// what both MongoDB and FerretDB accept: [a-z0-9_], at most 63 bytes.
func databaseName(testName string) string {
	const maxPrefix = 40
	var b strings.Builder
	lastUnderscore := false
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= maxPrefix {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			lastUnderscore = false
		} else if !lastUnderscore {
			b.WriteByte('_')
			lastUnderscore = true
		}
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:]) // crypto/rand.Read never fails
	return strings.Trim(b.String(), "_") + "_" + hex.EncodeToString(suffix[:])
}
