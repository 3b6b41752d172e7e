package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/acme/platform/deploy/devstack/demoapp"
	"github.com/acme/platform/pkg/testkit/embeddedmongo"
)

// stackConfig is where things run. Ports are fixed so that the README's
// curl lines work as printed.
type stackConfig struct {
	binDir      string
	dataDir     string
	mongoAddr   string
	accountAddr string
	accountOps  string
	convAddr    string
	convOps     string
	// webhookAddr is where the local webhook receiver listens.
	webhookAddr string
	// demoAppAddr is where the demo app is served; jsClient is the
	// JavaScript client's entry point it bundles.
	demoAppAddr string
	jsClient    string
	// traces: the services export their spans to a receiver at
	// tracesAddr, which prints each trace.
	traces     bool
	tracesAddr string
	// provisionFile is the demo data, shared with docker compose.
	provisionFile string
}

// The demo credentials of deploy/compose/provision/demo.json, for the banner.
const (
	demoAccount  = "demo"
	demoUser     = "demo"
	demoPassword = "plum-orbit-canvas-ladder"
	emptyAccount = "empty"
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg stackConfig
	fs := flag.NewFlagSet("devstack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.binDir, "bin", "bin", "folder holding the service binaries")
	fs.StringVar(&cfg.dataDir, "data", ".data", "folder of the embedded store's data (git-ignored)")
	fs.StringVar(&cfg.provisionFile, "provision", "deploy/compose/provision/demo.json", "demo data created on first start (account provision format)")
	fs.StringVar(&cfg.mongoAddr, "mongo-addr", "127.0.0.1:27018", "listen address of the embedded MongoDB-compatible store")
	fs.StringVar(&cfg.accountAddr, "account-addr", "127.0.0.1:8080", "listen address of the account service")
	fs.StringVar(&cfg.accountOps, "account-ops-addr", "127.0.0.1:9090", "operations address of the account service")
	fs.StringVar(&cfg.convAddr, "conversations-addr", "127.0.0.1:8081", "listen address of the conversations service")
	fs.StringVar(&cfg.convOps, "conversations-ops-addr", "127.0.0.1:9091", "operations address of the conversations service")
	fs.StringVar(&cfg.webhookAddr, "webhook-addr", "127.0.0.1:8082", "listen address of the local webhook receiver that prints each verified delivery")
	fs.StringVar(&cfg.demoAppAddr, "demo-app-addr", "127.0.0.1:8083", "listen address of the demo app (its client's redirect URI is http://ADDR/callback)")
	fs.StringVar(&cfg.jsClient, "js-client", "clients/js/src/index.ts", "entry point of the JavaScript client's sources, bundled for the demo app")
	fs.BoolVar(&cfg.traces, "traces", false, "print each trace of both services here (they export OTLP/HTTP to --traces-addr)")
	fs.StringVar(&cfg.tracesAddr, "traces-addr", "127.0.0.1:4318", "listen address of the local OTLP/HTTP trace receiver (with --traces)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	started := time.Now()
	db, err := embeddedmongo.Start(ctx, embeddedmongo.Options{
		Dir:    filepath.Join(cfg.dataDir, "mongo"),
		Addr:   cfg.mongoAddr,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		err = fmt.Errorf("start embedded store: %w", err)
		if isAddrInUse(err.Error()) {
			err = fmt.Errorf("%w\n%s", err, portsHint)
		}
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := db.Stop(stopCtx); err != nil {
			fmt.Fprintln(stderr, "devstack: stop embedded store:", err)
		}
	}()
	fmt.Fprintf(stdout, "embedded MongoDB-compatible store at %s (data in %s)\n", db.URI(), cfg.dataDir)

	mfaKey, err := ensureKey(cfg.dataDir, mfaKeyFile)
	if err != nil {
		return err
	}
	account := filepath.Join(cfg.binDir, "account")
	accountEnv := []string{
		// TOTP secrets encrypted under the data folder's key.
		"ACCOUNT_MFA_SECRET_KEY=" + mfaKey,
		"ACCOUNT_MONGODB_URI=" + db.URI(),
		"ACCOUNT_HTTP_ADDR=" + cfg.accountAddr,
		"ACCOUNT_OPS_ADDR=" + cfg.accountOps,
		"ACCOUNT_ISSUER=http://" + cfg.accountAddr,
		"ACCOUNT_LOG_LEVEL=info",
		// The demo app's page calls both services from its own origin.
		"ACCOUNT_CORS_ORIGINS=http://" + cfg.demoAppAddr,
	}

	webhookKey, err := ensureKey(cfg.dataDir, webhookKeyFile)
	if err != nil {
		return err
	}
	conversations := filepath.Join(cfg.binDir, "conversations")
	conversationsEnv := []string{
		// Webhooks: secrets encrypted under the data folder's key; plain
		// http to loopback, where the local receiver listens.
		"CONVERSATIONS_WEBHOOK_SECRET_KEY=" + webhookKey,
		"CONVERSATIONS_WEBHOOK_ALLOW_HTTP=true",
		"CONVERSATIONS_WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8,::1/128",
		"CONVERSATIONS_MONGODB_URI=" + db.URI(),
		"CONVERSATIONS_HTTP_ADDR=" + cfg.convAddr,
		"CONVERSATIONS_OPS_ADDR=" + cfg.convOps,
		"CONVERSATIONS_JWKS_URL=http://" + cfg.accountAddr + "/.well-known/jwks.json",
		"CONVERSATIONS_ISSUER=http://" + cfg.accountAddr,
		"CONVERSATIONS_LOG_LEVEL=info",
		"CONVERSATIONS_CORS_ORIGINS=http://" + cfg.demoAppAddr,
	}

	if cfg.traces {
		if err := startTraceReceiver(ctx.Done(), cfg.tracesAddr, stdout); err != nil {
			return fmt.Errorf("%w\n%s", err, portsHint)
		}
		accountEnv = append(accountEnv, traceEnv(cfg.tracesAddr)...)
		conversationsEnv = append(conversationsEnv, traceEnv(cfg.tracesAddr)...)
	}

	if err := seedOnce(ctx, cfg.dataDir, account, cfg.provisionFile, accountEnv, stdout); err != nil {
		return err
	}
	client, err := ensureDemoClient(ctx, cfg.dataDir, account, accountEnv, stdout)
	if err != nil {
		return err
	}
	appClientID, err := ensureDemoApp(ctx, cfg.dataDir, account, cfg.demoAppAddr, accountEnv, stdout)
	if err != nil {
		return err
	}

	logs, err := os.OpenFile(filepath.Join(cfg.dataDir, "services.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open service log: %w", err)
	}
	defer logs.Close()

	var wg sync.WaitGroup
	errc := make(chan error, 1)
	lasts := []*lastLine{{}, {}}
	procs := []*exec.Cmd{service(account, accountEnv, logs, lasts[0]), service(conversations, conversationsEnv, logs, lasts[1])}
	for i, p := range procs {
		last := lasts[i]
		if err := p.Start(); err != nil {
			return fmt.Errorf("start %s: %w", p.Path, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Wait(); err != nil && ctx.Err() == nil {
				select {
				case errc <- exitError(filepath.Base(p.Path), err, last.String(), logs.Name()):
				default:
				}
			}
		}()
	}
	defer func() {
		// SIGTERM lets each service drain its requests and close MongoDB.
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		wg.Wait()
	}()

	for _, ops := range []string{cfg.accountOps, cfg.convOps} {
		if err := waitReady(ctx, "http://"+ops+"/readyz", 60*time.Second, errc); err != nil {
			return err
		}
	}
	rc := &receiver{out: stdout}
	receiverURL, err := startReceiver(ctx, cfg.webhookAddr, rc)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, portsHint)
	}
	hook, err := ensureDemoWebhook(ctx, cfg.dataDir, "http://"+cfg.accountAddr, "http://"+cfg.convAddr, client, receiverURL)
	if err != nil {
		return err
	}
	rc.setSecrets(hook.Secret)
	if err := startDemoApp(ctx, cfg.demoAppAddr, cfg.jsClient, demoapp.Config{
		Issuer: "http://" + cfg.accountAddr, ConversationsURL: "http://" + cfg.convAddr,
		ClientID: appClientID, AccountName: demoAccount,
	}); err != nil {
		if isAddrInUse(err.Error()) {
			err = fmt.Errorf("%w\n%s", err, portsHint)
		}
		return err
	}
	printBanner(stdout, cfg, client, time.Since(started), logs.Name())
	fmt.Fprintf(stdout, `local webhook receiver  %s  (endpoint %s of account %q, every event type;
  its id and secret in %s): each verified delivery is printed here, e.g. after
  curl -s -X POST http://%s/v1/webhooks/%s/test -H "Authorization: Bearer $ACCESS"

`, receiverURL, hook.ID, demoAccount, filepath.Join(cfg.dataDir, demoWebhookFile), cfg.convAddr, hook.ID)
	if cfg.traces {
		fmt.Fprintf(stdout, "local trace receiver    http://%s/v1/traces: each trace of both services is printed here\n\n", cfg.tracesAddr)
	}

	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, "\nstopping…")
		return nil
	case err := <-errc:
		return err
	}
}

// seedOnce creates the demo data with the account binary's own idempotent
// provision command and the same file docker compose uses, once per data
// folder: a marker file records that it was done, so deleting data you made
// with curl never brings the demo back.
func seedOnce(ctx context.Context, dataDir, account, provisionFile string, env []string, stdout io.Writer) error {
	marker := filepath.Join(dataDir, "seeded")
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	fmt.Fprintln(stdout, "first start: creating demo data from", provisionFile)
	cmd := exec.CommandContext(ctx, account, "provision", "--file", provisionFile)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("seed: account provision: %w\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fmt.Fprintln(stdout, " ", line)
	}
	if err := os.WriteFile(marker, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write seed marker: %w", err)
	}
	return nil
}

// service is a service process; its output goes to the shared log file
// and to a lastLine that keeps its last words.
func service(bin string, env []string, logs io.Writer, last *lastLine) *exec.Cmd {
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = io.MultiWriter(logs, last)
	cmd.Stderr = cmd.Stdout
	return cmd
}

// portsHint says how to move the stack off ports another program holds.
const portsHint = `another program is using one of the ports; stop it, or choose other ports, e.g.
  make run DEVSTACK_ARGS='--account-addr 127.0.0.1:18080 --account-ops-addr 127.0.0.1:19090 --conversations-addr 127.0.0.1:18081 --conversations-ops-addr 127.0.0.1:19091 --webhook-addr 127.0.0.1:18082 --demo-app-addr 127.0.0.1:18083 --mongo-addr 127.0.0.1:27118'
(./bin/devstack --help lists every address; the README's curl lines then need the new ports)`

// exitError says which service stopped, with the last line it wrote (the
// reason, as its main prints it) and, when that is a port in use, how to
// choose other ports.
func exitError(name string, err error, lastLine, logFile string) error {
	msg := fmt.Sprintf("%s exited: %v", name, err)
	if lastLine != "" {
		msg += "\n  " + lastLine
	}
	if isAddrInUse(lastLine) {
		msg += "\n" + portsHint
	}
	return fmt.Errorf("%s\n(full log: %s)", msg, logFile)
}

func isAddrInUse(s string) bool { return strings.Contains(s, "address already in use") }

func waitReady(ctx context.Context, url string, timeout time.Duration, errc <-chan error) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s", url, timeout)
		}
		select {
		case <-ctx.Done():
			return errors.New("interrupted while starting")
		case err := <-errc:
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func printBanner(w io.Writer, cfg stackConfig, client demoClient, took time.Duration, logFile string) {
	a, c := "http://"+cfg.accountAddr, "http://"+cfg.convAddr
	clientFile := filepath.Join(cfg.dataDir, demoClientFile)
	fmt.Fprintf(w, `
ready in %s
  account service         %s   (ops: http://%s/readyz, /metrics)
  conversations service   %s   (ops: http://%s/readyz, /metrics)
  OpenAPI                 %s/openapi.yaml  %s/openapi.yaml
  logs                    %s

demo app                  http://%s  (open it in a browser and sign in with the
  demo credentials: the authorization code flow with PKCE, then your conversations, live)

demo credentials: accountName %q, username %q, password %q
(account %q has a user %q with the same password and no definitions)

try:
  TOKEN=$(curl -s %s/login -H 'Content-Type: application/json' \
    -d '{"username":"%s","password":"%s","accountName":"%s"}' \
    | sed -E 's/.*"id_token":"([^"]+)".*/\1/')
  curl -s %s/definitions -H "Authorization: Bearer $TOKEN"
  curl -s %s/v1/conversations -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' -d '{"subject":"Hello"}'
  curl -si '%s/v1/conversations?limit=2' -H "Authorization: Bearer $TOKEN"

demo service client (account %q, scopes %s):
  client_id     %s
  client_secret %s
  (also in %s, for ". %s")
  ACCESS=$(curl -s -u %s:%s -d grant_type=client_credentials %s/oauth2/token \
    | sed -E 's/.*"access_token":"([^"]+)".*/\1/')
  curl -s %s/v1/conversations -H "Authorization: Bearer $ACCESS"

Ctrl-C stops everything; the next "make run" keeps the data.
`, took.Round(time.Millisecond), a, cfg.accountOps, c, cfg.convOps, a, c, logFile,
		cfg.demoAppAddr, demoAccount, demoUser, demoPassword, emptyAccount, demoUser,
		a, demoUser, demoPassword, demoAccount, a, c, c,
		demoAccount, strings.ReplaceAll(demoClientScopes, ",", " "), client.ID, client.Secret,
		clientFile, clientFile, client.ID, client.Secret, a, c)
}
