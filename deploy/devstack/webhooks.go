package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	client "github.com/acme/platform/clients/go"
)

// The local webhook receiver of make run, like `stripe listen`: an
// endpoint of the demo account points at it, and it prints each delivery
// it verified with the endpoint's secret (the Go client's VerifyWebhook).

const (
	// webhookKeyFile holds the key that encrypts webhook secrets at rest
	// (CONVERSATIONS_WEBHOOK_SECRET_KEY), made on the first start.
	webhookKeyFile = "webhook-secret.key"
	// mfaKeyFile holds the key that encrypts users' TOTP secrets at rest
	// (ACCOUNT_MFA_SECRET_KEY), made on the first start.
	mfaKeyFile = "mfa-secret.key"
	// demoWebhookFile keeps the demo endpoint's id and secret, as shell
	// variables: the service shows a secret only once.
	demoWebhookFile = "demo-webhook.env"
)

// ensureKey returns the data folder's key of that name, making it on
// first use: 32 random bytes, base64 (a secret-encrypting key).
func ensureKey(dataDir, name string) (string, error) {
	path := filepath.Join(dataDir, name)
	if data, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(data)), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	key := base64.StdEncoding.EncodeToString(b)
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	return key, nil
}

// demoWebhook is the endpoint the local receiver serves.
type demoWebhook struct {
	ID, Secret string
}

// ensureDemoWebhook returns the demo endpoint pointing at receiverURL,
// creating it with the demo client when the data folder has none (or the
// one it names no longer exists, or points elsewhere).
func ensureDemoWebhook(ctx context.Context, dataDir, accountURL, convURL string, dc demoClient, receiverURL string) (demoWebhook, error) {
	c, err := client.New(client.Config{AccountURL: accountURL, ConversationsURL: convURL,
		ClientCredentials: client.ClientCredentials{ClientID: dc.ID, ClientSecret: dc.Secret}})
	if err != nil {
		return demoWebhook{}, err
	}
	path := filepath.Join(dataDir, demoWebhookFile)
	if data, err := os.ReadFile(path); err == nil {
		var w demoWebhook
		for line := range strings.Lines(string(data)) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
			switch k {
			case "WEBHOOK_ID":
				w.ID = v
			case "WEBHOOK_SECRET":
				w.Secret = v
			}
		}
		if got, err := c.GetWebhook(ctx, w.ID); err == nil && got.URL == receiverURL && w.Secret != "" {
			if !got.Enabled { // disabled while no receiver ran: enable again
				enable := true
				if _, err := c.UpdateWebhook(ctx, w.ID, client.WebhookPatch{Enabled: &enable}); err != nil {
					return demoWebhook{}, err
				}
			}
			return w, nil
		}
	}
	created, err := c.CreateWebhook(ctx, client.NewWebhook{URL: receiverURL, Description: "make run's local receiver (deploy/devstack)"})
	if err != nil {
		return demoWebhook{}, fmt.Errorf("create the demo webhook endpoint: %w", err)
	}
	w := demoWebhook{ID: created.ID, Secret: created.Secret}
	content := fmt.Sprintf("WEBHOOK_ID=%s\nWEBHOOK_SECRET=%s\n", w.ID, w.Secret)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return demoWebhook{}, fmt.Errorf("write demo webhook: %w", err)
	}
	return w, nil
}

// receiver prints every delivery it verifies; an unverified one is
// refused (400) and printed as such.
type receiver struct {
	mu      sync.Mutex
	secrets []string
	out     io.Writer
}

func (rc *receiver) setSecrets(s ...string) {
	rc.mu.Lock()
	rc.secrets = s
	rc.mu.Unlock()
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		return
	}
	rc.mu.Lock()
	secrets := rc.secrets
	rc.mu.Unlock()
	ev, err := client.VerifyWebhook(secrets, r.Header, body)
	if err != nil {
		fmt.Fprintf(rc.out, "webhook refused: %v\n", err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	seq := "-"
	if ev.Type != client.EventWebhookTest {
		seq = fmt.Sprint(ev.Sequence)
	}
	var data bytes.Buffer
	if raw, ok := rawData(body); ok && json.Compact(&data, raw) == nil && data.Len() > 300 {
		data.Truncate(297)
		data.WriteString("...")
	}
	trace := ""
	if tp := r.Header.Get("traceparent"); tp != "" {
		trace = " traceparent " + tp
	}
	fmt.Fprintf(rc.out, "webhook %s %s sequence %s (signature verified)%s %s\n", ev.Type, ev.ID, seq, trace, data.String())
	w.WriteHeader(http.StatusNoContent)
}

func rawData(body []byte) (json.RawMessage, bool) {
	var ev struct {
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(body, &ev) != nil {
		return nil, false
	}
	return ev.Data, true
}

// startReceiver listens on addr; the server ends with ctx.
func startReceiver(ctx context.Context, addr string, rc *receiver) (string, error) {
	at, err := serve(ctx, addr, rc)
	if err != nil {
		return "", fmt.Errorf("webhook receiver: %w", err)
	}
	return (&url.URL{Scheme: "http", Host: at.String(), Path: "/webhooks"}).String(), nil
}
