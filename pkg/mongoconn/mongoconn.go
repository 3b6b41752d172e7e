// Package mongoconn holds what both services need around the MongoDB driver:
// a client with timeouts that suit a request path, a readiness check on a
// connection of its own, and the classification of driver errors into "the
// database is unreachable" (a 503 that heals by itself), "no pooled
// connection free in time" (the overloaded 503) and everything else.
package mongoconn

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/acme/platform/pkg/problem"
)

// Connect returns a client for uri. It does not wait for the server: the
// driver connects lazily and reconnects by itself, so a service starts (and
// reports not-ready) while MongoDB is still coming up.
//
// Server selection is bounded by selectTimeout so that a request made while
// the database is down fails fast with a 503 instead of hanging for the
// driver's default 30 seconds. A database that is selected but does not
// answer (a frozen process keeps its connections open) is bounded by each
// request's deadline (web.Budget), not here: a client-wide operation
// timeout would also cut the index builds at start and the purges, which
// may rightly take longer on a large collection. A non-nil monitor sees
// every command the client sends (see CommandCounter).
func Connect(uri string, selectTimeout time.Duration, monitor *event.CommandMonitor) (*mongo.Client, error) {
	if selectTimeout <= 0 {
		selectTimeout = 3 * time.Second
	}
	opts := options.Client().
		ApplyURI(uri).
		SetServerSelectionTimeout(selectTimeout).
		SetConnectTimeout(selectTimeout).
		SetRetryWrites(true)
	if monitor != nil {
		opts.SetMonitor(monitor)
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("mongodb client for configured URI: %w", err)
	}
	return client, nil
}

// Readiness is the readiness check of a database, on a client of its own
// (ConnectReadiness): nil while the primary answers a ping within silence
// (the requests' timeout). A database that does not answer for that long,
// connected or not (a frozen process accepts connections and never
// replies), fails every request's budget too, so the replica is not ready;
// one that answers more slowly than a probe waits is slow, and stays ready
// until silence has passed without an answer. A failed server selection or
// a refused or reset connection is unreachable at once. At most one ping is
// in flight: a probe that finds one waits for it.
type Readiness struct {
	client  *mongo.Client
	silence time.Duration

	mu sync.Mutex
	// pending is closed when the ping in flight ends; nil when none is.
	pending chan struct{}
	// err is what the last ping that ended means for readiness.
	err error
	// unanswered is when the first ping since the last answer started;
	// zero while the last ping was answered.
	unanswered time.Time
}

// NewReadiness returns the readiness check of client, which fails once the
// database has left pings unanswered for silence (3 s when not positive).
func NewReadiness(client *mongo.Client, silence time.Duration) *Readiness {
	if silence <= 0 {
		silence = 3 * time.Second
	}
	return &Readiness{client: client, silence: silence}
}

// Check returns nil when the database is ready; it returns by the end of
// ctx at the latest, the ping it started going on for the next probe.
func (r *Readiness) Check(ctx context.Context) error {
	r.mu.Lock()
	if r.pending == nil {
		r.ping()
	}
	pending := r.pending
	r.mu.Unlock()
	select {
	case <-pending:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.err
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.silent(time.Now())
}

// silent is the error of a database that has answered no ping since
// r.unanswered, once silence has passed; nil before. r.mu is held.
func (r *Readiness) silent(now time.Time) error {
	if waited := now.Sub(r.unanswered); !r.unanswered.IsZero() && waited >= r.silence {
		return fmt.Errorf("ping mongodb: no answer for %v: %w", waited.Round(time.Millisecond), problem.ErrUnavailable)
	}
	return nil
}

// ping starts a ping bounded by silence. r.mu is held.
func (r *Readiness) ping() {
	done := make(chan struct{})
	r.pending = done
	if r.unanswered.IsZero() {
		r.unanswered = time.Now()
	}
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), r.silence)
		defer cancel()
		err := r.client.Ping(ctx, readpref.Primary())
		r.mu.Lock()
		defer r.mu.Unlock()
		r.pending = nil
		var selErr topology.ServerSelectionError
		switch {
		case err == nil:
			r.err, r.unanswered = nil, time.Time{}
		case ctx.Err() != nil && !errors.As(err, &selErr) && (!mongo.IsNetworkError(err) || mongo.IsTimeout(err)):
			// No answer in time, on a selected server: silent, not refused.
			r.err = r.silent(time.Now())
		default:
			r.err = fmt.Errorf("ping mongodb: %w", Classify(err))
		}
	}()
}

// readinessPoolSize is the connection pool of the readiness client: /readyz
// is asked by a few probes at a time, never by the request load.
const readinessPoolSize = 2

// ConnectReadiness returns a client of its own for the readiness check
// (/readyz pings the primary with it; see Readiness). Pinging on the client that
// serves requests would wait in line behind them for a pooled connection,
// and a busy pool would then report the database as unreachable: under
// Kubernetes, every replica would leave the Service at once during a
// traffic spike. This client's small pool is used by nothing else, so the
// check answers whether the database is reachable, and only that.
func ConnectReadiness(uri string, selectTimeout time.Duration) (*mongo.Client, error) {
	if selectTimeout <= 0 {
		selectTimeout = 3 * time.Second
	}
	opts := options.Client().
		ApplyURI(uri).
		// Shorter than a probe's 2 s: a database the driver's monitor found
		// unreachable (a stopped process) fails the probe that asks, rather
		// than leaving it to time out while the ping waits for a server.
		SetServerSelectionTimeout(min(selectTimeout, readinessSelectTimeout)).
		// The driver's monitor gives each heartbeat the connect timeout: a
		// database busy with a burst (or a store that runs one command at
		// a time, as the embedded one) may take longer than the requests'
		// bound to answer it without being unreachable. A refused or reset
		// connection still fails at once.
		SetConnectTimeout(max(selectTimeout, readinessHeartbeatTimeout)).
		SetMaxPoolSize(readinessPoolSize).
		SetAppName("readiness")
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("mongodb readiness client for configured URI: %w", err)
	}
	return client, nil
}

// readinessHeartbeatTimeout is the least time the readiness client's
// monitor waits for a heartbeat before it takes the database for
// unreachable.
const readinessHeartbeatTimeout = 10 * time.Second

// readinessSelectTimeout bounds the readiness ping's wait for a server.
const readinessSelectTimeout = time.Second

// defaultPoolSize is the driver's maxPoolSize when the URI sets none.
const defaultPoolSize = 100

// PoolSize is the size of the connection pool of a client for uri: its
// maxPoolSize, or the driver's default 100 when it sets none (or 0, which
// the driver takes as unbounded). The services bound the requests they
// work on at once to it by default, so that no request waits in line for a
// connection.
func PoolSize(uri string) int {
	opts := options.Client().ApplyURI(uri)
	if opts.MaxPoolSize == nil || *opts.MaxPoolSize == 0 || *opts.MaxPoolSize > 1<<20 {
		return defaultPoolSize
	}
	return int(*opts.MaxPoolSize)
}

// Classify wraps err with problem.ErrOverloaded when no connection of a
// full pool came free in time (the database answers, but this process has
// more operations waiting than connections: the overloaded 503), and with
// problem.ErrUnavailable when it means the database could not be reached
// (no server selectable, network failure, timeout, including the request's
// deadline on a database that does not answer, a new connection not
// accepted in time, a connection pool cleared by another operation's
// network failure), so that the HTTP layer answers 503 with Retry-After.
// Other errors are returned as they are.
func Classify(err error) error {
	if err == nil || errors.Is(err, problem.ErrUnavailable) || errors.Is(err, problem.ErrOverloaded) {
		return err
	}
	// Checked first: it is a timeout too (mongo.IsTimeout), but the server
	// was selected, so the database is reachable; unless the pool had room
	// for more connections: then the wait was for one the database did not
	// accept in time (a frozen database takes connections and never answers
	// their handshake).
	var waitErr topology.WaitQueueTimeoutError
	if errors.As(err, &waitErr) {
		if poolHadRoom(waitErr) {
			return errors.Join(problem.ErrUnavailable, err)
		}
		return errors.Join(problem.ErrOverloaded, err)
	}
	var selErr topology.ServerSelectionError
	// A pool cleared while the database goes away fails the operations
	// waiting on it with a retryable pool error, not a network one; its
	// retry fails the same way while the database is still down.
	var poolErr driver.RetryablePoolError
	if errors.As(err, &selErr) || mongo.IsNetworkError(err) || mongo.IsTimeout(err) ||
		(errors.As(err, &poolErr) && poolErr.Retryable()) ||
		errors.Is(err, mongo.ErrClientDisconnected) || errors.Is(err, topology.ErrTopologyClosed) {
		return errors.Join(problem.ErrUnavailable, err)
	}
	return err
}

// poolCounts finds the pool's counts in a WaitQueueTimeoutError's message,
// the only place the driver gives them.
var poolCounts = regexp.MustCompile(`total connections: (\d+), maxPoolSize: (\d+)`)

// poolHadRoom reports whether the pool of err held fewer connections than
// its bound when the wait ended.
func poolHadRoom(err topology.WaitQueueTimeoutError) bool {
	m := poolCounts.FindStringSubmatch(err.Error())
	if m == nil {
		return false
	}
	total, err1 := strconv.Atoi(m[1])
	limit, err2 := strconv.Atoi(m[2])
	return err1 == nil && err2 == nil && total < limit
}

// Wrap names the failed operation and classifies err; nil stays nil.
func Wrap(err error, op string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, Classify(err))
}
