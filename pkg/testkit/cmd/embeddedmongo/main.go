// Command embeddedmongo runs the embedded MongoDB-compatible server of
// package embeddedmongo (FerretDB on SQLite, behind its command-serialising
// proxy) as a process of its own, so that test binaries reach it over the
// wire and need not link FerretDB. Package mongoproc builds and starts it;
// it is a test tool, like the package it wraps.
//
//	embeddedmongo -dir DATA [-addr 127.0.0.1:0] [-addr-file FILE]
//	              [-idle-exit 2s -lock FILE] [-remove-dir] [-watch-stdin]
//
// Once the server answers, it writes {"addr": host:port, "pid": N} to
// -addr-file (atomically) and logs its URI on stderr. It stops cleanly on
// SIGTERM or SIGINT, when standard input reaches end-of-file (-watch-stdin:
// the starter keeps a pipe open, so the server does not outlive it), or
// when no client has been connected for -idle-exit. On the way out, holding
// -lock when given, it removes -addr-file (if it still names this process),
// stops the server and, with -remove-dir, deletes the data folder; a
// starter that takes the same lock therefore never finds a server that is
// shutting down.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/acme/platform/pkg/testkit/embeddedmongo"
	"github.com/acme/platform/pkg/testkit/internal/procfile"
)

// gcPercent replaces the Go default of 100 unless $GOGC is set: FerretDB
// allocates for every document it scans and a sixth of the server's CPU
// went to collecting; a test store's heap is tens of MiB, so four times
// that is cheap.
const gcPercent = 400

// procs replaces the Go default (one per CPU) unless $GOMAXPROCS is set:
// the proxy lets one command through at a time, so a second processor
// only adds the cost of handing work between threads (an eighth of the
// server's CPU in a store test), on machines whose cores the tests
// already share.
const procs = 1

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(procs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "embeddedmongo:", err)
		os.Exit(1)
	}
}

type config struct {
	dir, addr, addrFile, lockFile string
	idleExit                      time.Duration
	removeDir, watchStdin         bool
}

const (
	// startTimeout bounds the start of the server.
	startTimeout = time.Minute
	// shutdownTimeout bounds taking the lock on the way out, and stopping.
	shutdownTimeout = 30 * time.Second
)

func run(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("embeddedmongo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.dir, "dir", "", "data folder (one SQLite file per database), created if missing; required")
	fs.StringVar(&cfg.addr, "addr", embeddedmongo.DefaultAddr, "listen address, host:port")
	fs.StringVar(&cfg.addrFile, "addr-file", "", `file to write {"addr","pid"} to once the server answers; removed on exit`)
	fs.DurationVar(&cfg.idleExit, "idle-exit", 0, "exit once no client has been connected for this long (0: never)")
	fs.StringVar(&cfg.lockFile, "lock", "", "file to flock while deciding to exit when idle and while cleaning up")
	fs.BoolVar(&cfg.removeDir, "remove-dir", false, "delete the data folder on exit")
	fs.BoolVar(&cfg.watchStdin, "watch-stdin", false, "exit when standard input reaches end-of-file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.dir == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("-dir is required and no arguments are accepted")
	}

	if cfg.watchStdin {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			_, _ = io.Copy(io.Discard, stdin)
			cancel()
		}()
	}

	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	srv, err := embeddedmongo.Start(startCtx, embeddedmongo.Options{Dir: cfg.dir, Addr: cfg.addr})
	cancel()
	if err != nil {
		if cfg.removeDir {
			_ = os.RemoveAll(cfg.dir)
		}
		return err
	}
	if cfg.addrFile != "" {
		if err := procfile.Write(cfg.addrFile, procfile.Server{Addr: srv.Addr(), PID: os.Getpid()}); err != nil {
			return errors.Join(err, shutdown(srv, cfg, func() {}))
		}
	}
	fmt.Fprintf(stderr, "embeddedmongo: serving %s (data in %s)\n", srv.URI(), cfg.dir)

	unlock, why := wait(ctx, srv, cfg, stderr)
	fmt.Fprintf(stderr, "embeddedmongo: stopping: %s\n", why)
	return shutdown(srv, cfg, unlock)
}

// wait returns when ctx ends or, with -idle-exit, once no client has been
// connected for that long; it returns holding -lock (if any) and says why.
func wait(ctx context.Context, srv *embeddedmongo.Server, cfg config, stderr io.Writer) (unlock func(), why string) {
	var idle <-chan time.Time
	if cfg.idleExit > 0 {
		tick := time.NewTicker(min(cfg.idleExit/4, time.Second))
		defer tick.Stop()
		idle = tick.C
	}
	idleLongEnough := func() bool {
		ok, since := srv.Idle()
		return ok && time.Since(since) >= cfg.idleExit
	}
	for {
		select {
		case <-ctx.Done():
			return lock(cfg, stderr), "signal or end of standard input"
		case <-idle:
		}
		if !idleLongEnough() {
			continue
		}
		// A starter connects under the lock: once it is ours, and the
		// server still idle, nobody can pick this server any more.
		unlock := lock(cfg, stderr)
		if idleLongEnough() {
			return unlock, fmt.Sprintf("no client for %v", cfg.idleExit)
		}
		unlock()
	}
}

// lock takes -lock, if given; when that takes too long, it goes on without
// (a starter may then find the address file a moment longer, and fail to
// connect: it takes the server for dead and starts another).
func lock(cfg config, stderr io.Writer) (unlock func()) {
	if cfg.lockFile == "" {
		return func() {}
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	unlock, err := procfile.Lock(ctx, cfg.lockFile)
	if err != nil {
		fmt.Fprintln(stderr, "embeddedmongo:", err)
		return func() {}
	}
	return unlock
}

// shutdown removes the address file, stops the server, removes the data
// folder with -remove-dir, and then calls unlock.
func shutdown(srv *embeddedmongo.Server, cfg config, unlock func()) error {
	defer unlock()
	var errs []error
	if cfg.addrFile != "" {
		errs = append(errs, procfile.RemoveIfOwn(cfg.addrFile, os.Getpid()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		// The server may still be using the folder: keep it.
		return errors.Join(append(errs, err)...)
	}
	if cfg.removeDir {
		if err := os.RemoveAll(cfg.dir); err != nil {
			errs = append(errs, fmt.Errorf("removing data folder: %w", err))
		}
	}
	return errors.Join(errs...)
}
