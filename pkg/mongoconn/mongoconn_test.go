package mongoconn_test

import (
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
	}{
		{"a cleared pool", fmt.Errorf("insert: %w", clearedPool{}), true},
		{"a pool error that is not retryable", notRetryablePool{}, false},
		{"no server selectable", topology.ServerSelectionError{Wrapped: errors.New("timeout")}, true},
		{"a disconnected client", mongo.ErrClientDisconnected, true},
		{"a closed topology", topology.ErrTopologyClosed, true},
		{"a duplicate key", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000}}}, false},
		{"any other error", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mongoconn.Classify(tc.err)
			if is := errors.Is(got, problem.ErrUnavailable); is != tc.unavailable {
				t.Errorf("Classify(%v) is ErrUnavailable: %v, want %v", tc.err, is, tc.unavailable)
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
