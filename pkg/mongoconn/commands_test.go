package mongoconn_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/acme/platform/pkg/mongoconn"
)

func TestCommandCounterCountsByName(t *testing.T) {
	reg := prometheus.NewRegistry()
	monitor := mongoconn.NewCommandCounter(reg).Monitor()
	for _, name := range []string{"find", "find", "insert"} {
		monitor.Started(context.Background(), &event.CommandStartedEvent{CommandName: name})
	}
	want := `
# HELP mongodb_commands_total Commands sent to MongoDB, by command name (find, insert, update, getMore, ...).
# TYPE mongodb_commands_total counter
mongodb_commands_total{command="find"} 2
mongodb_commands_total{command="insert"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mongodb_commands_total"); err != nil {
		t.Fatal(err)
	}
	var none *mongoconn.CommandCounter
	if none.Monitor() != nil {
		t.Fatal("a nil counter gave a monitor")
	}
}
