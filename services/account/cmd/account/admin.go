package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/account"
	"github.com/acme/platform/services/account/mongostore"
	"github.com/acme/platform/services/account/password"
)

// adminEnv is what operator commands work with.
type adminEnv struct {
	store  *mongostore.Store
	hasher *password.Hasher
	// users applies the rules of the API to the user commands: the
	// username rules, the password policy, the end of every session. Its
	// policy is loaded by the first user command (userRules), so that the
	// other commands do not read the blocklist.
	users *account.Users
	// secretOverlap is rotate-client-secret's default --overlap.
	secretOverlap time.Duration
}

type adminCommand func(ctx context.Context, env adminEnv, args []string, stdin io.Reader, stdout io.Writer) error

var adminCommands = map[string]adminCommand{
	"create-account": createAccount,
	"list-accounts":  listAccounts,
	"create-user":    createUser,
	"set-password":   setPassword,
	"disable-user": func(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
		return setDisabled(ctx, env, args, out, true)
	},
	"enable-user": func(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
		return setDisabled(ctx, env, args, out, false)
	},
	"create-definition": createDefinition,
	"provision":         provision,

	"create-client":        createClient,
	"update-client":        updateClient,
	"list-clients":         listClients,
	"rotate-client-secret": rotateClientSecret,
	"disable-client":       setClientDisabled(true),
	"enable-client":        setClientDisabled(false),
}

// adminDBTimeout is the least time an operator command waits for the
// database to be selected and for a connection to it. MONGODB_TIMEOUT
// bounds a request's wait so that the API answers a 503 fast; a command run
// by hand or by a provisioning job would rather wait out a database that
// is busy or still starting than fail after 3 s (the driver's own default
// is 30 s).
const adminDBTimeout = 30 * time.Second

func openAdminEnv(ctx context.Context, cfg config) (adminEnv, func(), error) {
	client, err := mongoconn.Connect(cfg.MongoDBURI, max(cfg.MongoDBTimeout, adminDBTimeout), nil)
	if err != nil {
		return adminEnv{}, nil, err
	}
	closeFn := func() { _ = client.Disconnect(context.WithoutCancel(ctx)) }
	store := mongostore.New(client.Database(cfg.MongoDBDatabase))
	if err := store.EnsureIndexes(ctx); err != nil {
		closeFn()
		return adminEnv{}, nil, err
	}
	hasher, err := password.New(password.Options{Params: passwordParams(cfg)})
	if err != nil {
		closeFn()
		return adminEnv{}, nil, err
	}
	users := &account.Users{Store: store, Sessions: store, Throttle: store, Hasher: hasher}
	return adminEnv{store: store, hasher: hasher, users: users, secretOverlap: cfg.ClientSecretOverlap}, closeFn, nil
}

func createAccount(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
	if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
		return errors.New("usage: account create-account NAME")
	}
	name := account.NormalizeName(args[0])
	if len(name) > account.MaxAccountNameLen {
		return fmt.Errorf("account name is longer than %d characters", account.MaxAccountNameLen)
	}
	acc, err := env.store.CreateAccount(ctx, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "created account %s (id %s)\n", acc.Name, acc.ID)
	return nil
}

func listAccounts(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
	if len(args) != 0 {
		return errors.New("usage: account list-accounts")
	}
	list, err := env.store.ListAccounts(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 1, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tCREATED")
	for _, a := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", a.Name, a.ID, a.CreatedAt.Format("2006-01-02T15:04:05Z"))
	}
	return tw.Flush()
}

// userFlags parses --account and --username (and --password-file when
// withPassword), resolving the account.
type userFlags struct {
	account      account.Account
	username     string
	passwordFile string
}

func parseUserFlags(ctx context.Context, env adminEnv, name string, args []string, withPassword bool) (userFlags, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	accountName := fs.String("account", "", "account name")
	username := fs.String("username", "", "username")
	var passwordFile *string
	if withPassword {
		passwordFile = fs.String("password-file", "", "file holding the password (default: read stdin)")
	}
	if err := fs.Parse(args); err != nil {
		return userFlags{}, fmt.Errorf("%w (see account --help)", err)
	}
	if fs.NArg() > 0 {
		return userFlags{}, fmt.Errorf("unexpected arguments %q (passwords are read from stdin or --password-file)", fs.Args())
	}
	if strings.TrimSpace(*accountName) == "" || strings.TrimSpace(*username) == "" {
		return userFlags{}, errors.New("--account and --username are required")
	}
	if reason := account.ValidateUsername(*username); reason != "" {
		return userFlags{}, fmt.Errorf("--username %s", reason)
	}
	acc, err := env.store.AccountByName(ctx, *accountName)
	if err != nil {
		return userFlags{}, err
	}
	uf := userFlags{account: acc, username: account.NormalizeName(*username)}
	if passwordFile != nil {
		uf.passwordFile = *passwordFile
	}
	return uf, nil
}

// readPassword reads the password from file or stdin. Only one trailing
// newline is removed (what echo or a text editor adds); anything else is part
// of the password.
func readPassword(path string, stdin io.Reader) (string, error) {
	r := stdin
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("open password file: %w", err)
		}
		defer f.Close()
		r = f
	}
	if r == nil {
		return "", errors.New("no password file given")
	}
	data, err := io.ReadAll(io.LimitReader(bufio.NewReader(r), account.MaxPasswordLen+3))
	if err != nil {
		return "", fmt.Errorf("read password: %w", err)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	switch {
	case pw == "":
		return "", errors.New("the password is empty")
	case len(pw) > account.MaxPasswordLen:
		return "", fmt.Errorf("the password is longer than %d bytes", account.MaxPasswordLen)
	}
	return pw, nil
}

func createUser(ctx context.Context, env adminEnv, args []string, stdin io.Reader, out io.Writer) error {
	uf, err := parseUserFlags(ctx, env, "create-user", args, true)
	if err != nil {
		return err
	}
	pw, err := readPassword(uf.passwordFile, stdin)
	if err != nil {
		return err
	}
	users, err := env.userRules()
	if err != nil {
		return err
	}
	u, err := users.Create(ctx, ownerOf(uf.account), account.NewUser{Username: &uf.username, Password: &pw})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "created user %s in account %s (id %s)\n", u.Username, uf.account.Name, u.ID)
	return nil
}

func setPassword(ctx context.Context, env adminEnv, args []string, stdin io.Reader, out io.Writer) error {
	uf, err := parseUserFlags(ctx, env, "set-password", args, true)
	if err != nil {
		return err
	}
	pw, err := readPassword(uf.passwordFile, stdin)
	if err != nil {
		return err
	}
	u, err := env.store.UserByName(ctx, uf.account.ID, uf.username)
	if err != nil {
		return err
	}
	users, err := env.userRules()
	if err != nil {
		return err
	}
	if err := users.SetPassword(ctx, ownerOf(uf.account), u.ID, pw); err != nil {
		return err
	}
	fmt.Fprintf(out, "password of %s in account %s changed; every session of the user ended\n", uf.username, uf.account.Name)
	return nil
}

func setDisabled(ctx context.Context, env adminEnv, args []string, out io.Writer, disabled bool) error {
	name := "enable-user"
	if disabled {
		name = "disable-user"
	}
	uf, err := parseUserFlags(ctx, env, name, args, false)
	if err != nil {
		return err
	}
	u, err := env.store.UserByName(ctx, uf.account.ID, uf.username)
	if err != nil {
		return err
	}
	if _, err := env.users.Patch(ctx, ownerOf(uf.account), u.ID, account.UserPatch{Disabled: &disabled}); err != nil {
		return err
	}
	state := "enabled"
	if disabled {
		state = "disabled"
	}
	fmt.Fprintf(out, "user %s in account %s %s\n", uf.username, uf.account.Name, state)
	return nil
}

// userRules returns env's Users with the password policy loaded.
func (env adminEnv) userRules() (*account.Users, error) {
	if env.users.Policy == nil {
		policy, err := account.LoadPasswordPolicy()
		if err != nil {
			return nil, err
		}
		env.users.Policy = policy
	}
	return env.users, nil
}

// ownerOf is the account a subcommand acts in, as the API's owner.
func ownerOf(acc account.Account) account.Owner {
	return account.Owner{AccountID: acc.ID, AccountName: acc.Name}
}

func createDefinition(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("create-definition", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	accountName := fs.String("account", "", "account name")
	file := fs.String("file", "", "JSON file with name, type, config, enabled")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w (see account --help)", err)
	}
	if *accountName == "" || *file == "" || fs.NArg() > 0 {
		return errors.New("usage: account create-definition --account NAME --file DEFINITION.json")
	}
	acc, err := env.store.AccountByName(ctx, *accountName)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return fmt.Errorf("read definition file: %w", err)
	}
	var in account.DefinitionInput
	if err := json.Unmarshal(data, &in); err != nil {
		return fmt.Errorf("definition file %s is not a valid definition: %w", *file, err)
	}
	d, err := in.Definition(acc.ID)
	if err != nil {
		return err
	}
	created, err := env.store.CreateDefinition(ctx, d)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "created definition %s (%s) in account %s (id %s)\n", created.Name, created.Type, acc.Name, created.ID)
	return nil
}
