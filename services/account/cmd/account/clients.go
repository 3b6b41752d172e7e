package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/acme/platform/services/account"
)

// Operator commands for service clients. A client is
// named by its account and its client_id, like every other operator
// command scopes by account: an id of another account is not found.

// createClient creates a client and prints its id and secret, the only
// time the secret is ever shown: the service keeps its hash. With
// --public it creates a public client, which has neither secret nor
// scopes (its tokens are its users'), so --scopes is refused with it.
func createClient(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("create-client", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	accountName := fs.String("account", "", "account name")
	name := fs.String("name", "", "name of the client")
	scopes := fs.String("scopes", "", "comma-separated scopes")
	public := fs.Bool("public", false, "a public client: no secret, password and refresh_token grants only")
	const usage = "usage: account create-client --account NAME --name CLIENT_NAME (--scopes SCOPE[,SCOPE...] | --public)"
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w (%s)", err, usage)
	}
	if *accountName == "" || *name == "" || (*scopes == "") == !*public || fs.NArg() > 0 {
		return errors.New(usage + "\nscopes: " + strings.Join(account.Scopes(), ", ") +
			"\na public client has no scopes: its tokens act as the user who logs in")
	}
	acc, err := env.store.AccountByName(ctx, *accountName)
	if err != nil {
		return err
	}
	if *public {
		c, err := account.NewPublicClient(acc, *name)
		if err != nil {
			return err
		}
		created, err := env.store.CreateClient(ctx, c)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "created public client %s in account %s (password and refresh_token grants; no secret)\n", created.Name, acc.Name)
		fmt.Fprintf(out, "client_id: %s\n", created.ID)
		return nil
	}
	c, secret, err := account.NewServiceClient(acc, *name, strings.Split(*scopes, ","))
	if err != nil {
		return err
	}
	created, err := env.store.CreateClient(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "created client %s in account %s with scopes %s\n", created.Name, acc.Name, strings.Join(created.Scopes, " "))
	printCredentials(out, created.ID, secret)
	return nil
}

// printCredentials prints a client's id and secret, one per line in a
// form scripts can pick up ("client_secret: " and the secret).
func printCredentials(out io.Writer, clientID, secret string) {
	fmt.Fprintf(out, "client_id: %s\nclient_secret: %s\n", clientID, secret)
	fmt.Fprintln(out, "The secret is shown only now; only its hash is stored. Keep it in your secret store.")
}

func listClients(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("list-clients", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	accountName := fs.String("account", "", "account name")
	const usage = "usage: account list-clients --account NAME"
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w (%s)", err, usage)
	}
	if *accountName == "" || fs.NArg() > 0 {
		return errors.New(usage)
	}
	acc, err := env.store.AccountByName(ctx, *accountName)
	if err != nil {
		return err
	}
	list, err := env.store.ListClients(ctx, acc.ID)
	if err != nil {
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(out, 1, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT_ID\tNAME\tSCOPES\tSTATE\tCREATED\tPREVIOUS SECRET VALID UNTIL")
	for _, c := range list {
		state := "enabled"
		if c.Disabled {
			state = "disabled"
		}
		previous := "-"
		if c.PreviousSecretHash != "" && c.PreviousSecretExpiresAt.After(now) {
			previous = c.PreviousSecretExpiresAt.UTC().Format(time.RFC3339)
		}
		scopes := strings.Join(c.Scopes, ",")
		if c.Public {
			// A public client has no scopes: its tokens are its users'.
			scopes = "(public)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.Name, scopes, state,
			c.CreatedAt.UTC().Format(time.RFC3339), previous)
	}
	return tw.Flush()
}

// clientFlags parses --account and --client (plus whatever extra adds to
// fs) and resolves the account.
func parseClientFlags(ctx context.Context, env adminEnv, fs *flag.FlagSet, usage string, args []string) (account.Account, string, error) {
	fs.SetOutput(io.Discard)
	accountName := fs.String("account", "", "account name")
	clientID := fs.String("client", "", "client_id")
	if err := fs.Parse(args); err != nil {
		return account.Account{}, "", fmt.Errorf("%w (%s)", err, usage)
	}
	if *accountName == "" || *clientID == "" || fs.NArg() > 0 {
		return account.Account{}, "", errors.New(usage)
	}
	acc, err := env.store.AccountByName(ctx, *accountName)
	if err != nil {
		return account.Account{}, "", err
	}
	return acc, *clientID, nil
}

// rotateClientSecret gives a client a new secret and prints it; the old
// one keeps working for the overlap, so that every instance of the calling
// backend can switch before it stops.
func rotateClientSecret(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("rotate-client-secret", flag.ContinueOnError)
	overlap := fs.Duration("overlap", env.secretOverlap, "how long the old secret keeps working (0: it stops now)")
	acc, clientID, err := parseClientFlags(ctx, env, fs,
		"usage: account rotate-client-secret --account NAME --client CLIENT_ID [--overlap DURATION]", args)
	if err != nil {
		return err
	}
	if *overlap < 0 {
		return fmt.Errorf("the overlap %v is negative", *overlap)
	}
	now := time.Now()
	secret, err := account.RotateClientSecret(ctx, env.store, acc.ID, clientID, *overlap, now)
	if err != nil {
		return err
	}
	if *overlap > 0 {
		fmt.Fprintf(out, "rotated the secret of client %s in account %s; the old secret works until %s\n",
			clientID, acc.Name, now.Add(*overlap).UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintf(out, "rotated the secret of client %s in account %s; the old secret no longer works\n", clientID, acc.Name)
	}
	printCredentials(out, clientID, secret)
	return nil
}

func setClientDisabled(disabled bool) adminCommand {
	name, state := "enable-client", "enabled"
	if disabled {
		name, state = "disable-client", "disabled"
	}
	return func(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
		acc, clientID, err := parseClientFlags(ctx, env, flag.NewFlagSet(name, flag.ContinueOnError),
			"usage: account "+name+" --account NAME --client CLIENT_ID", args)
		if err != nil {
			return err
		}
		if err := env.store.SetClientDisabled(ctx, acc.ID, clientID, disabled); err != nil {
			return err
		}
		fmt.Fprintf(out, "client %s in account %s %s\n", clientID, acc.Name, state)
		return nil
	}
}
