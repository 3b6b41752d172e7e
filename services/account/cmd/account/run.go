package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/acme/platform/pkg/servicecmd"
	"github.com/acme/platform/pkg/token"
)

const usage = `account runs the account service (Interface A) or one operator command.

Usage:
  account [serve]                 run the service (the default)
  account create-account NAME     create an account
  account list-accounts           list accounts
  account create-user --account NAME --username USER [--password-file FILE]
                                  create a user; the password is read from FILE or stdin and
                                  must meet the password policy (15+ characters, not a common
                                  password, not containing the username or account name)
  account set-password --account NAME --username USER [--password-file FILE]
                                  set a password (the same policy); ends every session of the user
  account disable-user --account NAME --username USER
                                  ends every session of the user; logins fail until enable-user
  account enable-user --account NAME --username USER
  account create-definition --account NAME --file DEFINITION.json
                                  create a definition from {"name","type","config","enabled"}
  account create-client --account NAME --name CLIENT_NAME --scopes SCOPE[,SCOPE...]
                                  create a service client (OAuth client_credentials); prints
                                  its client_id and client_secret, the secret only this once;
                                  scopes: definitions:read, definitions:write,
                                  conversations:read, conversations:write,
                                  users:read, users:write,
                                  webhooks:manage (with conversations:read)
  account create-client --account NAME --name CLIENT_NAME --public
                                  create a public client (an app that cannot keep a secret:
                                  single-page, mobile); it has no secret and sends its
                                  client_id alone, for authorization_code and refresh_token
      create-client also takes  [--redirect-uri URI]... [--post-logout-redirect-uri URI]...
                                  [--allow-password-grant]: where the sign-in page and logout
                                  may send the browser back (exact; https, http on 127.0.0.1
                                  or [::1] with any port, or a private-use scheme such as
                                  com.example.app:/cb), and the password grant (avoid it)
  account update-client --account NAME --client CLIENT_ID [--redirect-uri URI]... [--no-redirect-uris]
                          [--post-logout-redirect-uri URI]... [--no-post-logout-redirect-uris]
                          [--allow-password-grant | --no-password-grant]
                                  change a client's redirect URIs (a list given replaces the
                                  old one) and its password grant
  account list-clients --account NAME
  account rotate-client-secret --account NAME --client CLIENT_ID [--overlap DURATION]
                                  print a new secret (not for a public client); the old one works for the overlap
                                  (default ACCOUNT_CLIENT_SECRET_OVERLAP; 0 stops it now)
  account disable-client --account NAME --client CLIENT_ID
  account enable-client --account NAME --client CLIENT_ID
  account provision --file PROVISION.json
                                  make accounts, users and definitions exist (idempotent);
                                  users name a passwordFile, see deploy/compose/provision
  account generate-key [--alg RS256|ES256|EdDSA]
                                  print a new private signing key (JWK) for ACCOUNT_KEY_FILES
  account healthcheck             exit 0 when this host's service is ready (container health checks)
  account --version | --help

Passwords and client secrets are never taken as flags: flags show up in shell history and ps.

Configuration (environment variables):
`

// run is the whole program behind main, with its inputs and outputs passed
// in so that tests can drive it. Configuration comes from the process
// environment (envconfig reads os.Getenv).
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd, rest := "serve", args
	if len(args) > 0 {
		cmd, rest = args[0], args[1:]
	}
	switch cmd {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return servicecmd.PrintUsage(stdout, envPrefix, &config{})
	case "-v", "--version", "version":
		fmt.Fprintln(stdout, "account", version)
		return nil
	case "generate-key":
		return generateKey(rest, stdout, stderr)
	}

	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	if cmd == "healthcheck" {
		return servicecmd.HealthCheck(ctx, cfg.OpsAddr)
	}
	if cmd == "serve" {
		if len(rest) > 0 {
			return fmt.Errorf("serve takes no arguments, got %q", strings.Join(rest, " "))
		}
		return serve(ctx, cfg, stderr)
	}
	admin, ok := adminCommands[cmd]
	if !ok {
		return fmt.Errorf("unknown command %q (see account --help)", cmd)
	}
	env, closeEnv, err := openAdminEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeEnv()
	if err := admin(ctx, env, rest, stdin, stdout); err != nil {
		return errors.Join(fmt.Errorf("%s", cmd), err)
	}
	return nil
}

// generateKey prints a new private signing key as a JWK, for a key file
// (ACCOUNT_KEY_FILES, a Kubernetes Secret). Its kid goes to stderr.
func generateKey(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("generate-key", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	alg := fs.String("alg", token.DefaultAlgorithm, "RS256, ES256 or EdDSA")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return errors.New("usage: account generate-key [--alg RS256|ES256|EdDSA]")
	}
	key, err := token.GenerateKey(*alg)
	if err != nil {
		return err
	}
	data, err := token.MarshalPrivateJWK(key)
	if err != nil {
		return err
	}
	kid, _ := key.KeyID()
	fmt.Fprintf(stderr, "generated %s key, kid %s\n", *alg, kid)
	_, err = fmt.Fprintf(stdout, "%s\n", data)
	return err
}
