package mongoconn_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/pkg/problem"
)

// silentServer accepts connections and never answers on them, as a frozen
// database process does; it returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

// TestReadinessFailsOnADatabaseThatDoesNotAnswer: every probe returns when
// its own context ends, and once the database has answered nothing for
// the silence the check reports it unavailable.
func TestReadinessFailsOnADatabaseThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	const silence = 200 * time.Millisecond
	client, err := mongoconn.ConnectReadiness("mongodb://"+silentServer(t)+"/?directConnection=true", silence)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	ready := mongoconn.NewReadiness(client, silence)
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	for probes := 1; ; probes++ {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		errc := make(chan error, 1)
		go func() { errc <- ready.Check(ctx) }()
		var err error
		select {
		case err = <-errc:
		case <-time.After(time.Until(deadline) - 5*time.Second):
			t.Fatalf("probe %d did not return after its context ended", probes)
		}
		cancel()
		if err != nil {
			if !errors.Is(err, problem.ErrUnavailable) {
				t.Fatalf("probe %d: %v, want an unavailable database", probes, err)
			}
			return
		}
		if time.Until(deadline) < 5*time.Second {
			t.Fatalf("still ready after %d probes of a database that never answers", probes)
		}
	}
}
