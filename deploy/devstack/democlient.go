package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The demo service client: a backend of the demo account that gets tokens
// with the client-credentials grant.
const (
	demoClientName   = "demo-backend"
	demoClientScopes = "conversations:read,conversations:write,definitions:read,users:read,users:write,webhooks:manage"
	// demoClientFile keeps its id and secret in the data folder, as shell
	// variables: the service stores only the secret's hash, so this is
	// where later starts (and the README's ". .data/demo-client.env") read
	// them from.
	demoClientFile = "demo-client.env"
)

// demoClient holds the demo service client's credentials.
type demoClient struct {
	ID, Secret, Scopes string
}

// ensureDemoClient returns the demo service client, creating it with the
// account binary's create-client command when the data folder has none
// yet (on the first start, or the first since service clients exist), or
// one of other scopes (a data folder older than the scope webhooks:manage:
// a new client is made, the old one stays).
func ensureDemoClient(ctx context.Context, dataDir, account string, env []string, stdout io.Writer) (demoClient, error) {
	path := filepath.Join(dataDir, demoClientFile)
	if data, err := os.ReadFile(path); err == nil {
		c := parseDemoClient(string(data), "=")
		if c.ID == "" || c.Secret == "" {
			return demoClient{}, fmt.Errorf("%s does not hold CLIENT_ID and CLIENT_SECRET; delete it to create a new demo client", path)
		}
		if c.Scopes == demoClientScopes {
			return c, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return demoClient{}, fmt.Errorf("read demo client: %w", err)
	}
	cmd := exec.CommandContext(ctx, account, "create-client", "--account", demoAccount,
		"--name", demoClientName, "--scopes", demoClientScopes)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return demoClient{}, fmt.Errorf("seed: account create-client: %w\n%s", err, out)
	}
	c := parseDemoClient(string(out), ": ")
	c.Scopes = demoClientScopes
	if c.ID == "" || c.Secret == "" {
		return demoClient{}, fmt.Errorf("seed: account create-client printed no client_id and client_secret:\n%s", out)
	}
	fmt.Fprintf(stdout, "  created demo service client %s (account %s, scopes %s)\n", c.ID, demoAccount, demoClientScopes)
	content := fmt.Sprintf("CLIENT_ID=%s\nCLIENT_SECRET=%s\nCLIENT_SCOPES=%s\n", c.ID, c.Secret, c.Scopes)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return demoClient{}, fmt.Errorf("write demo client: %w", err)
	}
	return c, nil
}

// parseDemoClient reads the client id and secret from lines "client_id" or
// "CLIENT_ID", sep, value (create-client's output, or the data file).
func parseDemoClient(text, sep string) demoClient {
	var c demoClient
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), sep)
		if !ok {
			continue
		}
		switch strings.ToLower(key) {
		case "client_id":
			c.ID = strings.TrimSpace(value)
		case "client_secret":
			c.Secret = strings.TrimSpace(value)
		case "client_scopes":
			c.Scopes = strings.TrimSpace(value)
		}
	}
	return c
}
