// Command devstack is the local development stack behind "make run": an
// embedded MongoDB-compatible store (FerretDB on SQLite) with its data in a
// git-ignored folder, the service binaries started against it, and demo data
// created on first start only. Ctrl-C stops everything cleanly; the next run
// keeps the data and the signing key, so tokens issued before still verify.
//
// It is a developer tool: production binaries never link the embedded store.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}
