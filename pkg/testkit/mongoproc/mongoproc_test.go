package mongoproc_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/testkit/internal/procfile"
	"github.com/acme/platform/pkg/testkit/mongoproc"
)

// goneWithin bounds waiting for a server process to end: generous, since
// it is no measure of speed, only of the process ending at all.
const goneWithin = 30 * time.Second

// envHelper makes the test binary a helper process instead of running the
// tests: "shared DIR" holds a lease on the shared server of DIR, "private
// DIR" runs a private server on DIR. Either prints "pid N" (the server's)
// and then waits for its standard input to close.
const envHelper = "MONGOPROC_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(envHelper); h != "" {
		if err := helper(h); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func helper(h string) error {
	mode, dir, _ := strings.Cut(h, " ")
	ctx := context.Background()
	var pid int
	var release func() error
	switch mode {
	case "shared":
		l, err := mongoproc.Acquire(ctx, dir)
		if err != nil {
			return err
		}
		pid, release = l.PID(), l.Release
	case "private":
		p, err := mongoproc.Start(ctx, mongoproc.Options{Dir: dir})
		if err != nil {
			return err
		}
		pid, release = p.PID(), func() error { return p.Stop(ctx) }
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	fmt.Printf("pid %d\n", pid)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return release()
}

// startHelper runs this test binary as a helper (see envHelper) and
// returns it, with the pid of the server it holds, and its standard input.
// env is added to the helper's environment.
func startHelper(t *testing.T, mode, dir string, env ...string) (*exec.Cmd, int, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// Its own temporary folder, for what a killed helper leaves behind.
	cmd.Env = append(os.Environ(), envHelper+"="+mode+" "+dir, "TMPDIR="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper %s: no pid line: %v", mode, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if err != nil {
		t.Fatalf("helper %s: %q: %v", mode, line, err)
	}
	return cmd, pid, stdin
}

// waitGone fails the test unless process pid ends within goneWithin.
func waitGone(t *testing.T, pid int, why string) {
	t.Helper()
	for deadline := time.Now().Add(goneWithin); procfile.Alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("server process %d still running %v after %s", pid, goneWithin, why)
		}
	}
}

func connect(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(2 * time.Second))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

// acquire takes a lease on the shared server of dir; when the test ends,
// it releases it and waits for the server to end, before dir is removed.
func acquire(t *testing.T, dir string) *mongoproc.Lease {
	t.Helper()
	l, err := mongoproc.Acquire(t.Context(), dir)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() {
		_ = l.Release()
		waitGone(t, l.PID(), "the test ended")
	})
	return l
}

func stop(t *testing.T, p *mongoproc.Process) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

func TestStartRequiresDir(t *testing.T) {
	t.Parallel()
	if _, err := mongoproc.Start(t.Context(), mongoproc.Options{}); err == nil {
		t.Fatal("Start without Dir: got nil error")
	}
}

// TestRestartKeepsData is the outage scenario: stop the server process,
// start another on the same folder and address, and find the data again
// through the same client.
func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	first, err := mongoproc.Start(ctx, mongoproc.Options{Dir: dir})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got, want := first.URI(), "mongodb://"+first.Addr()+"/"; got != want {
		t.Errorf("URI() = %q, want %q", got, want)
	}
	c := connect(t, first.URI())
	coll := c.Database("restart").Collection("docs")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 42}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}

	stop(t, first)
	if procfile.Alive(first.PID()) {
		t.Errorf("process %d still runs after Stop", first.PID())
	}
	stop(t, first) // a second Stop is harmless
	if err := c.Ping(ctx, nil); err == nil {
		t.Fatal("Ping while stopped: got nil error")
	}

	second, err := mongoproc.Start(ctx, mongoproc.Options{Dir: dir, Addr: first.Addr()})
	if err != nil {
		t.Fatalf("Start again: %v", err)
	}
	defer stop(t, second)
	if second.Addr() != first.Addr() {
		t.Fatalf("restarted on %s, want %s", second.Addr(), first.Addr())
	}
	var got struct {
		ID string `bson:"_id"`
		N  int    `bson:"n"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got); err != nil {
		t.Fatalf("FindOne after restart (same client): %v", err)
	}
	if got.ID != "a" || got.N != 42 {
		t.Errorf("after restart got %+v, want {a 42}", got)
	}
}

func TestStartOnBusyAddrFailsWithTheServersLog(t *testing.T) {
	t.Parallel()
	p, err := mongoproc.Start(t.Context(), mongoproc.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer stop(t, p)
	_, err = mongoproc.Start(t.Context(), mongoproc.Options{Dir: t.TempDir(), Addr: p.Addr()})
	if err == nil {
		t.Fatal("Start on an address in use: got nil error")
	}
	if !strings.Contains(err.Error(), "cannot listen on "+p.Addr()) {
		t.Errorf("error does not quote the server's reason: %v", err)
	}
}

// TestBuildsTheServerWithoutEnvBinary: with no prebuilt binary named (make
// test names one, built once for all its test binaries), the starter finds
// the command's source and builds it itself, as on a go test of one package.
func TestBuildsTheServerWithoutEnvBinary(t *testing.T) {
	t.Parallel()
	_, pid, stdin := startHelper(t, "private", t.TempDir(), mongoproc.EnvBinary+"=")
	if !procfile.Alive(pid) {
		t.Fatalf("server %d not running", pid)
	}
	_ = stdin.Close()
	waitGone(t, pid, "its starter released it")
}

// TestPrivateServerEndsWithItsStarter: a private server does not outlive
// the process that started it, even one killed outright.
func TestPrivateServerEndsWithItsStarter(t *testing.T) {
	t.Parallel()
	helper, pid, _ := startHelper(t, "private", t.TempDir())
	if !procfile.Alive(pid) {
		t.Fatalf("server %d not running", pid)
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid, "its starter was killed")
}

// TestSharedServerEndsAfterTheLastLease: leases taken one after another
// share one server, which keeps running while any lease is held, ends
// once the last one is released, and leaves nothing behind; the next
// Acquire starts a new one.
func TestSharedServerEndsAfterTheLastLease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	first, second := acquire(t, dir), acquire(t, dir)
	if first.PID() != second.PID() || first.URI() != second.URI() {
		t.Fatalf("two servers for one folder: %d at %s and %d at %s", first.PID(), first.URI(), second.PID(), second.URI())
	}
	c := connect(t, second.URI())
	if _, err := c.Database("shared").Collection("docs").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}
	if err := c.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}

	// With the first lease released and the client gone, the second lease
	// alone keeps the server, past its idle grace (checked every quarter
	// of it).
	if err := first.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	time.Sleep(mongoproc.SharedIdleExit + mongoproc.SharedIdleExit/2)
	if !procfile.Alive(second.PID()) {
		t.Fatalf("server %d ended while a lease was held", second.PID())
	}
	c = connect(t, second.URI())
	if n, err := c.Database("shared").Collection("docs").CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Fatalf("CountDocuments on the shared server = %d, %v; want 1", n, err)
	}
	if err := c.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}

	if err := second.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	waitGone(t, second.PID(), "its last lease was released")
	assertNoLeftovers(t, dir)

	third := acquire(t, dir)
	if third.PID() == second.PID() {
		t.Errorf("Acquire after the server ended returned the old server %d", third.PID())
	}
	if err := connect(t, third.URI()).Ping(ctx, nil); err != nil {
		t.Fatalf("Ping the new server: %v", err)
	}
}

// assertNoLeftovers fails unless dir holds only the lock and the log.
func assertNoLeftovers(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "lock" && e.Name() != "server.log" {
			t.Errorf("left behind in the shared folder: %s", e.Name())
		}
	}
}

// TestSharedServerEndsWhenItsHoldersAreKilled: test binaries that die
// without releasing (killed by a timeout, Ctrl-C) do not leave the server
// running.
func TestSharedServerEndsWhenItsHoldersAreKilled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, pid, _ := startHelper(t, "shared", dir)
	b, pidB, _ := startHelper(t, "shared", dir)
	if pid != pidB {
		t.Fatalf("two helpers, two servers: %d and %d", pid, pidB)
	}
	for _, h := range []*exec.Cmd{a, b} {
		if err := h.Process.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, pid, "its lease holders were killed")
	assertNoLeftovers(t, dir)
}

// TestSharedServerEndsWhenItsHolderExits is the normal end of a test
// binary: it releases its lease and exits.
func TestSharedServerEndsWhenItsHolderExits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, pid, stdin := startHelper(t, "shared", dir)
	_ = stdin.Close()
	if err := h.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	waitGone(t, pid, "its lease holder exited")
	assertNoLeftovers(t, dir)
}

// TestSharedServerReplacesAKilledOne: a server killed outright leaves its
// address file and data folder; the next Acquire starts a fresh server
// regardless.
func TestSharedServerReplacesAKilledOne(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	l, err := mongoproc.Acquire(ctx, dir)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if err := syscall.Kill(l.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, l.PID(), "SIGKILL")
	_ = l.Release()
	if _, err := os.Stat(filepath.Join(dir, "addr")); err != nil {
		t.Fatalf("the killed server left no address file (%v): this test proves nothing", err)
	}

	next := acquire(t, dir)
	if next.PID() == l.PID() {
		t.Fatalf("Acquire returned the killed server %d", l.PID())
	}
	c := connect(t, next.URI())
	if err := c.Ping(ctx, nil); err != nil {
		t.Fatalf("Ping the new server: %v", err)
	}
	_ = c.Disconnect(ctx)
	data, _ := filepath.Glob(filepath.Join(dir, "data-*"))
	if len(data) != 1 {
		t.Errorf("data folders %v, want only the new server's", data)
	}
}

func TestReleaseTwice(t *testing.T) {
	t.Parallel()
	l := acquire(t, t.TempDir())
	if err := l.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
}
