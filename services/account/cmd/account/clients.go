package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
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
// --redirect-uri and --post-logout-redirect-uri (each repeatable)
// register where the sign-in and logout endpoints may send the browser
// back; --allow-password-grant adds the password grant.
func createClient(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("create-client", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	accountName := fs.String("account", "", "account name")
	name := fs.String("name", "", "name of the client")
	scopes := fs.String("scopes", "", "comma-separated scopes")
	public := fs.Bool("public", false, "a public client: no secret, no client_credentials")
	var reg registrationFlags
	reg.add(fs)
	const usage = "usage: account create-client --account NAME --name CLIENT_NAME (--scopes SCOPE[,SCOPE...] | --public)" +
		" [--redirect-uri URI]... [--post-logout-redirect-uri URI]... [--allow-password-grant]"
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
	var c account.ServiceClient
	var secret string
	if *public {
		c, err = account.NewPublicClient(acc, *name)
	} else {
		c, secret, err = account.NewServiceClient(acc, *name, strings.Split(*scopes, ","))
	}
	if err != nil {
		return err
	}
	r, err := account.CheckRegistration(reg.registration(c.Registration(), true), c.Public)
	if err != nil {
		return err
	}
	c.Grants, c.RedirectURIs, c.PostLogoutRedirectURIs = r.Grants, r.RedirectURIs, r.PostLogoutRedirectURIs
	created, err := env.store.CreateClient(ctx, c)
	if err != nil {
		return err
	}
	if *public {
		fmt.Fprintf(out, "created public client %s in account %s (no secret)\n", created.Name, acc.Name)
	} else {
		fmt.Fprintf(out, "created client %s in account %s with scopes %s\n", created.Name, acc.Name, strings.Join(created.Scopes, " "))
	}
	printRegistration(out, r)
	if *public {
		fmt.Fprintf(out, "client_id: %s\n", created.ID)
		return nil
	}
	printCredentials(out, created.ID, secret)
	return nil
}

// updateClient changes the grants and redirect URIs of a client: each
// list given replaces the client's, one not given stays.
func updateClient(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("update-client", flag.ContinueOnError)
	var reg registrationFlags
	reg.add(fs)
	noPassword := fs.Bool("no-password-grant", false, "take the password grant away")
	acc, clientID, err := parseClientFlags(ctx, env, fs,
		"usage: account update-client --account NAME --client CLIENT_ID [--redirect-uri URI]... [--no-redirect-uris]"+
			" [--post-logout-redirect-uri URI]... [--no-post-logout-redirect-uris] [--allow-password-grant | --no-password-grant]", args)
	if err != nil {
		return err
	}
	if *noPassword && reg.password {
		return errors.New("--allow-password-grant and --no-password-grant exclude each other")
	}
	c, err := env.store.ClientByID(ctx, clientID)
	if err != nil {
		return err
	}
	r := reg.registration(c.Registration(), false)
	if *noPassword {
		r.Grants = slices.DeleteFunc(r.Grants, func(g string) bool { return g == account.GrantPassword })
	}
	r, err = account.UpdateClientRegistration(ctx, env.store, acc.ID, clientID, r)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "updated client %s in account %s\n", clientID, acc.Name)
	printRegistration(out, r)
	return nil
}

// registrationFlags are the flags of create-client and update-client that
// set a client's registration.
type registrationFlags struct {
	redirects, postLogout stringList
	noRedirects, noPost   bool
	password              bool
}

func (f *registrationFlags) add(fs *flag.FlagSet) {
	fs.Var(&f.redirects, "redirect-uri", "a redirect URI of the authorization endpoint (repeatable)")
	fs.Var(&f.postLogout, "post-logout-redirect-uri", "a redirect URI of the logout endpoint (repeatable)")
	fs.BoolVar(&f.password, "allow-password-grant", false, "allow the password grant (RFC 9700: avoid it)")
	if fs.Name() == "update-client" {
		fs.BoolVar(&f.noRedirects, "no-redirect-uris", false, "remove every redirect URI")
		fs.BoolVar(&f.noPost, "no-post-logout-redirect-uris", false, "remove every post-logout redirect URI")
	}
}

// registration applies the flags to r: a list given replaces r's; fresh
// starts from a new client's registration, where the password grant is
// only there when allowed.
func (f *registrationFlags) registration(r account.ClientRegistration, fresh bool) account.ClientRegistration {
	if fresh {
		r.Grants = slices.DeleteFunc(r.Grants, func(g string) bool { return g == account.GrantPassword })
	}
	if f.password && !slices.Contains(r.Grants, account.GrantPassword) {
		r.Grants = append(r.Grants, account.GrantPassword)
	}
	if len(f.redirects) > 0 || f.noRedirects {
		r.RedirectURIs = f.redirects
	}
	if len(f.postLogout) > 0 || f.noPost {
		r.PostLogoutRedirectURIs = f.postLogout
	}
	return r
}

// printRegistration prints a client's grants and redirect URIs.
func printRegistration(out io.Writer, r account.ClientRegistration) {
	fmt.Fprintf(out, "grants: %s\n", strings.Join(r.Grants, " "))
	for _, u := range r.RedirectURIs {
		fmt.Fprintf(out, "redirect_uri: %s\n", u)
	}
	for _, u := range r.PostLogoutRedirectURIs {
		fmt.Fprintf(out, "post_logout_redirect_uri: %s\n", u)
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, " ") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
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
	fmt.Fprintln(tw, "CLIENT_ID\tNAME\tSCOPES\tSTATE\tCREATED\tPREVIOUS SECRET VALID UNTIL\tGRANTS\tREDIRECT URIS")
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
		reg := c.Registration()
		redirects := strings.Join(reg.RedirectURIs, " ")
		if redirects == "" {
			redirects = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.Name, scopes, state,
			c.CreatedAt.UTC().Format(time.RFC3339), previous, strings.Join(reg.Grants, ","), redirects)
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
