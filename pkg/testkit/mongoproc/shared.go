package mongoproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/acme/platform/pkg/testkit/internal/procfile"
)

// SharedIdleExit is how long the shared server outlives its last lease:
// long enough for go test to start the next test binary of the run that
// needs it, short enough that none is left running a few seconds after
// go test has ended.
const SharedIdleExit = 2 * time.Second

// dialTimeout bounds connecting a lease to a server that claims to run.
const dialTimeout = 2 * time.Second

// Files of a shared server's folder.
const (
	lockFile = "lock"       // taken by starters and by the exiting server
	addrFile = "addr"       // written by the server once it answers
	logFile  = "server.log" // the server's output
	dataGlob = "data-*"     // one fresh data folder per server
)

// Lease is a hold on the shared server: the server runs at least until the
// lease is released or this process ends.
type Lease struct {
	uri  string
	pid  int
	conn net.Conn // the hold itself: an open connection
}

// Acquire returns a lease on the shared server of folder dir, starting the
// server (and building the command) when none runs. dir "" is the run's
// folder: under os.TempDir(), named after the user and the command binary.
// ctx bounds waiting for the lock, the build and the start; on a cold
// build cache the build takes minutes.
func Acquire(ctx context.Context, dir string) (*Lease, error) {
	bin, err := locate(ctx)
	if err != nil {
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	if dir == "" {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("embeddedmongo-%d-%s", os.Getuid(), hash(bin.path)))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	unlock, err := procfile.Lock(ctx, filepath.Join(dir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	defer unlock()

	// A server that runs exits only under the lock, which we hold: if it
	// answers now, it serves until this lease closes.
	addrPath := filepath.Join(dir, addrFile)
	if s, err := procfile.Read(addrPath); err == nil && procfile.Alive(s.PID) {
		if conn, err := net.DialTimeout("tcp", s.Addr, dialTimeout); err == nil {
			return &Lease{uri: uri(s.Addr), pid: s.PID, conn: conn}, nil
		}
	}

	// None runs: clear what a killed one left, and start a fresh one.
	if err := os.Remove(addrPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("mongoproc: removing stale address file: %w", err)
	}
	stale, _ := filepath.Glob(filepath.Join(dir, dataGlob))
	for _, d := range stale {
		if err := os.RemoveAll(d); err != nil {
			return nil, fmt.Errorf("mongoproc: removing stale data: %w", err)
		}
	}
	if err := build(ctx, bin); err != nil {
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	data, err := os.MkdirTemp(dir, dataGlob)
	if err != nil {
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	logPath := filepath.Join(dir, logFile)
	cmd, err := spawn(bin.path, logPath, nil, true,
		"-dir", data, "-addr-file", addrPath, "-remove-dir",
		"-idle-exit", SharedIdleExit.String(), "-lock", filepath.Join(dir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	exited := make(chan struct{})
	// Reap it if it ends before this process does; otherwise init will.
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s, err := waitReady(ctx, addrPath, logPath, cmd, exited)
	if err == nil {
		var conn net.Conn
		if conn, err = net.DialTimeout("tcp", s.Addr, dialTimeout); err == nil {
			return &Lease{uri: uri(s.Addr), pid: s.PID, conn: conn}, nil
		}
	}
	// Its files are cleared by the next start.
	_ = cmd.Process.Kill()
	return nil, fmt.Errorf("mongoproc: shared server in %s: %w", dir, err)
}

// URI returns the server's connection string, mongodb://host:port/.
func (l *Lease) URI() string { return l.uri }

// PID returns the server's process id.
func (l *Lease) PID() int { return l.pid }

// Release gives the lease up; the server exits SharedIdleExit after the
// last one. Release may be called more than once.
func (l *Lease) Release() error {
	if err := l.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("mongoproc: releasing lease: %w", err)
	}
	return nil
}
