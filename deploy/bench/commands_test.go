package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// serviceCommands sums every command's series, and nothing else.
func TestServiceCommandsSumsTheSeries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`# HELP mongodb_commands_total Commands sent to MongoDB.
# TYPE mongodb_commands_total counter
mongodb_commands_total{command="find"} 12
mongodb_commands_total{command="update"} 3.5e+01
mongodb_commands_totally_else 100
conversations_events_recorded_total 7
`))
	}))
	defer srv.Close()
	got, err := serviceCommands(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil || got != 47 {
		t.Fatalf("serviceCommands = %v, %v; want 47", got, err)
	}
}

func TestCmdsCell(t *testing.T) {
	counted := []sample{{ops: 10, commands: 50, counted: true}, {ops: 10, commands: 52, counted: true}, {ops: 4, commands: 20, counted: true}}
	if got := cmdsCell(counted, []sample{{ops: 5}}); got != "5.00 / –" {
		t.Fatalf("cmdsCell = %q", got)
	}
}
