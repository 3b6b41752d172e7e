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
// driver's default 30 seconds. A non-nil monitor sees every command the
// client sends (see CommandCounter).
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

// Ping is a readiness check: nil when the primary is reachable. A primary
// that the driver selected and holds a connection to, but that has not
// answered within ctx, is slow, not unreachable: readiness answers whether
// the database can be reached, and a slow database must not take every
// replica out of a Kubernetes Service at once (the requests themselves get
// their 503s). The database is unreachable when no primary can be selected
// (the driver's monitor lost it) or the connection fails (refused, reset).
// A connection the driver was still opening when ctx ended is slow too: a
// database busy with a burst may take longer than the probe to accept
// one; one that stays unreachable fails the monitor's next heartbeat, and
// selection then fails.
func Ping(ctx context.Context, client *mongo.Client) error {
	err := client.Ping(ctx, readpref.Primary())
	if err == nil {
		return nil
	}
	var selErr topology.ServerSelectionError
	if ctx.Err() != nil && !errors.As(err, &selErr) && (!mongo.IsNetworkError(err) || mongo.IsTimeout(err)) {
		return nil
	}
	return fmt.Errorf("ping mongodb: %w", Classify(err))
}

// readinessPoolSize is the connection pool of the readiness client: /readyz
// is asked by a few probes at a time, never by the request load.
const readinessPoolSize = 2

// ConnectReadiness returns a client of its own for the readiness check
// (/readyz pings the primary with it; see Ping). Pinging on the client that
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
		SetServerSelectionTimeout(selectTimeout).
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

// Classify wraps err with problem.ErrOverloaded when no pooled connection
// came free in time (the database answers, but this process has more
// operations waiting than connections: the overloaded 503), and with
// problem.ErrUnavailable when it means the database could not be reached
// (no server selectable, network failure, timeout, a connection pool
// cleared by another operation's network failure), so that the HTTP layer
// answers 503 with Retry-After. Other errors are returned as they are.
func Classify(err error) error {
	if err == nil || errors.Is(err, problem.ErrUnavailable) || errors.Is(err, problem.ErrOverloaded) {
		return err
	}
	// Checked first: it is a timeout too (mongo.IsTimeout), but the server
	// was selected, so the database is reachable.
	var waitErr topology.WaitQueueTimeoutError
	if errors.As(err, &waitErr) {
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

// Wrap names the failed operation and classifies err; nil stays nil.
func Wrap(err error, op string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, Classify(err))
}
