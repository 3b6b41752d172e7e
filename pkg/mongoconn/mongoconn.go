// Package mongoconn holds what both services need around the MongoDB driver:
// a client with timeouts that suit a request path, and the classification
// of driver errors into "the database is unreachable" (a 503 that heals by
// itself) versus everything else.
package mongoconn

import (
	"context"
	"errors"
	"fmt"
	"time"

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
// driver's default 30 seconds.
func Connect(uri string, selectTimeout time.Duration) (*mongo.Client, error) {
	if selectTimeout <= 0 {
		selectTimeout = 3 * time.Second
	}
	opts := options.Client().
		ApplyURI(uri).
		SetServerSelectionTimeout(selectTimeout).
		SetConnectTimeout(selectTimeout).
		SetRetryWrites(true)
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("mongodb client for configured URI: %w", err)
	}
	return client, nil
}

// Ping is a readiness check: nil when the primary answers.
func Ping(ctx context.Context, client *mongo.Client) error {
	if err := client.Ping(ctx, readpref.Primary()); err != nil {
		return fmt.Errorf("ping mongodb: %w", Classify(err))
	}
	return nil
}

// Classify wraps err with problem.ErrUnavailable when it means the database
// could not be reached (no server selectable, network failure, timeout, a
// connection pool cleared by another operation's network failure), so that
// the HTTP layer answers 503 with Retry-After. Other errors are returned as
// they are.
func Classify(err error) error {
	if err == nil || errors.Is(err, problem.ErrUnavailable) {
		return err
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
