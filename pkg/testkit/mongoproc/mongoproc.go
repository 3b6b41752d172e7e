// Package mongoproc runs the embedded MongoDB-compatible server (package
// embeddedmongo: FerretDB on SQLite) as a process of its own, the
// embeddedmongo command, reached over the wire like any MongoDB. Test
// binaries that use it do not link FerretDB and its SQLite: compiled and
// linked with -race into every test binary that needs a database, those
// were most of the time of a test run. The command is built once, without
// -race, as "make run" builds the dev stack (go build decides when it is
// stale), into the user's cache folder, or taken from $EMBEDDEDMONGO_BIN.
//
// Two ways to run it:
//
//   - Start runs a private server on a folder of the caller's, which the
//     caller stops and may start again on the same folder and address: how
//     tests simulate a database outage. It ends with its starter: it watches
//     a pipe the starter holds open.
//
//   - Acquire leases the server shared by all test binaries of a run (what
//     package mongotest uses). The first test binary that needs it builds
//     the command and starts it, detached, on a fresh data folder; the
//     others find it through an address file. Each holds a connection, its
//     lease, for as long as it runs; once the last lease has closed (the
//     binary exited, however it ended) the server waits SharedIdleExit, for
//     the next test binary of the run, and exits, deleting its data.
//     Starters and the exiting server take one file lock, so no starter
//     ever picks a server that is shutting down, and what a killed server
//     left behind is cleared by the next start. The folder is under
//     os.TempDir(), keyed by user and command binary: "make test" gives its
//     run a $TMPDIR of its own, so it gets its own server and can check that
//     none outlives its tests.
//
// Unix only (flock, setsid).
package mongoproc

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/acme/platform/pkg/testkit/internal/procfile"
)

// Options configure Start.
type Options struct {
	// Dir is the data folder, created if missing. Required.
	Dir string
	// Addr is the listen address, host:port. Default: a free loopback
	// port. To restart a stopped server where clients expect it, pass the
	// previous one's Addr().
	Addr string
}

// Process is a private server started by Start.
type Process struct {
	uri, addr string
	cmd       *exec.Cmd
	// keepAlive is our end of the server's standard input; the server
	// exits when it closes, with this process at the latest.
	keepAlive *os.File
	tmp       string // holds the address file and the server's log

	exited  chan struct{} // closed when the process has been waited for
	waitErr error         // set before exited is closed
	stop    sync.Once
}

// readyPoll is how often a starter looks for the address file.
const readyPoll = 10 * time.Millisecond

// Start builds the command if needed and runs a private server on
// opts.Dir; it returns once the server answers. ctx bounds the build and
// the start; the server runs until Stop, or until this process ends.
func Start(ctx context.Context, opts Options) (*Process, error) {
	if opts.Dir == "" {
		return nil, errors.New("mongoproc: Options.Dir is required")
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	bin, err := locate(ctx)
	if err != nil {
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	if err := build(ctx, bin); err != nil {
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	// The address file and the log, apart from the caller's data.
	tmp, err := os.MkdirTemp("", "embeddedmongo-proc-")
	if err != nil {
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	stdin, keepAlive, err := os.Pipe()
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	addrFile := filepath.Join(tmp, "addr")
	p := &Process{keepAlive: keepAlive, tmp: tmp, exited: make(chan struct{})}
	p.cmd, err = spawn(bin.path, filepath.Join(tmp, "server.log"), stdin, false,
		"-dir", opts.Dir, "-addr", addr, "-addr-file", addrFile, "-watch-stdin")
	_ = stdin.Close() // the child has its copy
	if err != nil {
		_ = keepAlive.Close()
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("mongoproc: %w", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	s, err := waitReady(ctx, addrFile, filepath.Join(tmp, "server.log"), p.cmd, p.exited)
	if err != nil {
		_ = p.cmd.Process.Kill()
		<-p.exited
		_ = keepAlive.Close()
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("mongoproc: server on %s: %w", opts.Dir, err)
	}
	p.addr, p.uri = s.Addr, uri(s.Addr)
	return p, nil
}

// URI returns the connection string, mongodb://host:port/.
func (p *Process) URI() string { return p.uri }

// Addr returns the host:port the server listens on; pass it as
// Options.Addr to start again on the same address after Stop.
func (p *Process) Addr() string { return p.addr }

// PID returns the server's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Stop asks the server to shut down (SIGTERM) and waits until it has
// exited, so Start on the same folder and address works again; clients see
// their connections closed. When ctx ends first, it kills the server. It
// reports an unclean exit, with the server's log. Stop may be called more
// than once.
func (p *Process) Stop(ctx context.Context) error {
	p.stop.Do(func() { _ = p.cmd.Process.Signal(syscall.SIGTERM) })
	var err error
	select {
	case <-p.exited:
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.exited
		err = fmt.Errorf("mongoproc: server %d killed, no exit after SIGTERM: %w", p.PID(), context.Cause(ctx))
	}
	if err == nil && p.waitErr != nil {
		err = fmt.Errorf("mongoproc: server %d: %w%s", p.PID(), p.waitErr, logTail(filepath.Join(p.tmp, "server.log")))
	}
	_ = p.keepAlive.Close()
	_ = os.RemoveAll(p.tmp)
	return err
}

// spawn starts bin with args, its output going to the file logPath and its
// standard input reading stdin (nil: /dev/null). A detached process gets a
// session of its own, so signals meant for the starter's process group
// (Ctrl-C) do not reach it: it ends through its leases instead.
func spawn(bin, logPath string, stdin *os.File, detach bool, args ...string) (*exec.Cmd, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its copy
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	return cmd, nil
}

// waitReady waits until the address file names cmd's process, and returns
// it; it fails when the process exits first or ctx ends, quoting the
// server's log.
func waitReady(ctx context.Context, addrFile, logPath string, cmd *exec.Cmd, exited <-chan struct{}) (procfile.Server, error) {
	for {
		if s, err := procfile.Read(addrFile); err == nil && s.PID == cmd.Process.Pid {
			return s, nil
		}
		select {
		case <-exited:
			return procfile.Server{}, fmt.Errorf("exited before it was ready: %v%s", cmd.ProcessState, logTail(logPath))
		case <-ctx.Done():
			return procfile.Server{}, fmt.Errorf("not ready: %w%s", context.Cause(ctx), logTail(logPath))
		case <-time.After(readyPoll):
		}
	}
}

// logTail returns the end of the log at path, for error messages.
func logTail(path string) string {
	const max = 4 << 10
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return "; its log:\n" + strings.TrimSpace(string(data))
}

func uri(addr string) string {
	return (&url.URL{Scheme: "mongodb", Host: addr, Path: "/"}).String()
}
