// Command bench measures the hot paths of the services against their
// physical limits and against a peer implementation, side by side in one
// process run, and prints the ratios as a table ("make bench"):
//
//   - token verification: pkg/token against the bare standard-library
//     signature check and against golang-jwt/v5 with a JWKS key function,
//     for RS256, ES256 and EdDSA;
//   - login: POST /login over loopback against bare argon2id verification
//     with the stored parameters, at the same concurrency;
//   - client credentials: POST /oauth2/token against the secret's hash
//     check plus one signature, and the account process's CPU per token;
//   - users: POST /users against one argon2id hash plus one insert, and
//     GET /users (100 per page) against the driver find of the same page;
//   - listing: GET /v1/conversations against the same find through the
//     driver, the 50th page against the first, and the conversations
//     process's CPU per page;
//   - messages: posting and listing a conversation's messages against the
//     same writes and finds through the driver;
//   - stream memory: what streams that never read, from the start of a
//     large backlog, add to the conversations process's peak RSS;
//   - relay: change → event with one and with three conversations
//     replicas on one store, and the database commands per event ordered;
//   - webhooks: deliveries to a local receiver against a bare loop of
//     signed POSTs, and the database commands per delivery with one and
//     with three replicas;
//   - tracing: the listing and a message post with tracing on (every
//     request sampled and exported to a receiver here) against tracing
//     off, and with tracing configured off against a build without it;
//   - start-up: exec to ready, per service.
//
// Every ratio comes from rounds that alternate both sides; the table gives
// the median and the range over the rounds, and beside every row the
// database commands per operation of each side (commands.go), by which
// the message post and the webhook deliveries are judged. Services run as the real
// binaries (built into a temporary folder) on loopback, against MONGODB_URI
// when set, else the embedded store of "make run". Runs are bounded in time
// and stop by themselves.
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
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
