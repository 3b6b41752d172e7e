// Command account runs the account service (Interface A) and its operator
// subcommands. Run "account --help" for both.
package main

import (
	"context"
	"os"

	"github.com/acme/platform/pkg/servicecmd"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	servicecmd.Main("account", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr) })
}
