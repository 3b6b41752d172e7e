package mongoconn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/pkg/problem"
)

// clearedPool stands for the driver's unexported error of an operation
// that waited on a pool another operation's network failure cleared: the
// driver names it only by the interface driver.RetryablePoolError.
type clearedPool struct{}

func (clearedPool) Error() string {
	return "connection pool for 127.0.0.1:27017 was cleared because another operation failed with: EOF"
}
func (clearedPool) Retryable() bool { return true }

type notRetryablePool struct{ clearedPool }

func (notRetryablePool) Retryable() bool { return false }

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		unavailable bool
		overloaded  bool
	}{
		{"a cleared pool", fmt.Errorf("insert: %w", clearedPool{}), true, false},
		{"a pool error that is not retryable", notRetryablePool{}, false, false},
		{"no server selectable", topology.ServerSelectionError{Wrapped: errors.New("timeout")}, true, false},
		{"a disconnected client", mongo.ErrClientDisconnected, true, false},
		{"a closed topology", topology.ErrTopologyClosed, true, false},
		{"a duplicate key", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000}}}, false, false},
		{"any other error", errors.New("boom"), false, false},
		// The database answers; this process had more operations waiting
		// than pooled connections.
		{"no pooled connection free in time", fmt.Errorf("find: %w", topology.WaitQueueTimeoutError{Wrapped: context.DeadlineExceeded}), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mongoconn.Classify(tc.err)
			if is := errors.Is(got, problem.ErrUnavailable); is != tc.unavailable {
				t.Errorf("Classify(%v) is ErrUnavailable: %v, want %v", tc.err, is, tc.unavailable)
			}
			if is := errors.Is(got, problem.ErrOverloaded); is != tc.overloaded {
				t.Errorf("Classify(%v) is ErrOverloaded: %v, want %v", tc.err, is, tc.overloaded)
			}
			wantCode := map[[2]bool]string{{false, false}: problem.CodeInternal, {true, false}: problem.CodeUnavailable, {false, true}: problem.CodeOverloaded}[[2]bool{tc.unavailable, tc.overloaded}]
			if p := problem.From(got); p.Code != wantCode {
				t.Errorf("problem.From(Classify(%v)) has code %q, want %q", tc.err, p.Code, wantCode)
			}
			if !strings.Contains(got.Error(), tc.err.Error()) {
				t.Errorf("Classify(%v) = %v, lost the cause", tc.err, got)
			}
		})
	}
	if mongoconn.Classify(nil) != nil {
		t.Error("Classify(nil) is not nil")
	}
}

func TestPoolSize(t *testing.T) {
	for uri, want := range map[string]int{
		"mongodb://localhost:27017":                100,
		"mongodb://localhost:27017/?maxPoolSize=7": 7,
		"mongodb://localhost:27017/?maxPoolSize=0": 100, // unbounded pool: the driver's default bound
		"mongodb://h1,h2/db?maxPoolSize=250&w=1":   250,
	} {
		if got := mongoconn.PoolSize(uri); got != want {
			t.Errorf("PoolSize(%q) = %d, want %d", uri, got, want)
		}
	}
}
