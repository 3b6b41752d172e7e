package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/acme/platform/deploy/devstack/demoapp"
)

// The demo app's public client: it signs users of the demo account in with
// the authorization code flow (deploy/devstack/demoapp).
const (
	demoAppName = "demo-app"
	// demoAppFile keeps its id and the URIs it was registered with, as
	// shell variables.
	demoAppFile = "demo-app.env"
)

// demoAppURIs are the redirect and post-logout redirect URIs of the demo
// app served at addr.
func demoAppURIs(addr string) (redirect, postLogout string) {
	return "http://" + addr + "/callback", "http://" + addr + "/"
}

// ensureDemoApp returns the demo app's client id, registering the public
// client with the account binary's create-client command when the data
// folder has none yet, or one registered for another address (a new one
// is made, the old one stays).
func ensureDemoApp(ctx context.Context, dataDir, account, addr string, env []string, stdout io.Writer) (string, error) {
	redirect, postLogout := demoAppURIs(addr)
	want := fmt.Sprintf("REDIRECT_URI=%s\nPOST_LOGOUT_REDIRECT_URI=%s\n", redirect, postLogout)
	path := filepath.Join(dataDir, demoAppFile)
	if data, err := os.ReadFile(path); err == nil {
		id, uris, _ := strings.Cut(string(data), "\n")
		if id, ok := strings.CutPrefix(id, "CLIENT_ID="); ok && id != "" && uris == want {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read demo app client: %w", err)
	}
	cmd := exec.CommandContext(ctx, account, "create-client", "--account", demoAccount, "--name", demoAppName,
		"--public", "--redirect-uri", redirect, "--post-logout-redirect-uri", postLogout)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("seed: account create-client --public: %w\n%s", err, out)
	}
	id := parseDemoClient(string(out), ": ").ID
	if id == "" {
		return "", fmt.Errorf("seed: account create-client --public printed no client_id:\n%s", out)
	}
	fmt.Fprintf(stdout, "  created demo app client %s (account %s, public):\n", id, demoAccount)
	for line := range strings.Lines(string(out)) {
		if !strings.HasPrefix(line, "client_id") && !strings.HasPrefix(line, "created ") {
			fmt.Fprint(stdout, "    ", line)
		}
	}
	if err := os.WriteFile(path, []byte("CLIENT_ID="+id+"\n"+want), 0o600); err != nil {
		return "", fmt.Errorf("write demo app client: %w", err)
	}
	return id, nil
}

// startDemoApp bundles the JavaScript client from its sources and serves
// the demo app at addr; the server ends with ctx.
func startDemoApp(ctx context.Context, addr, jsClientEntry string, cfg demoapp.Config) error {
	bundle, err := demoapp.BundleClient(jsClientEntry)
	if err != nil {
		return fmt.Errorf("%w\n(make run runs from the repository's root; elsewhere pass --js-client with the path of clients/js/src/index.ts)", err)
	}
	if _, err := serve(ctx, addr, demoapp.Handler(cfg, bundle)); err != nil {
		return fmt.Errorf("demo app: %w", err)
	}
	return nil
}

// serve serves h at addr until ctx ends and returns the address it
// listens on.
func serve(ctx context.Context, addr string, h http.Handler) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return ln.Addr(), nil
}
