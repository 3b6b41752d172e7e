// Command conversations runs the conversations service (Interface B). Run
// "conversations --help" for its configuration.
package main

import (
	"context"
	"os"

	"github.com/acme/platform/pkg/servicecmd"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	servicecmd.Main("conversations", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) })
}
