package clientstest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	client "github.com/acme/platform/clients/go"
)

// delivered is one request a suite's webhook receiver got.
type delivered struct {
	header http.Header
	body   []byte
}

// webhookReceiver is a real HTTP server on loopback that hands every
// request it gets to the test and answers 204.
func webhookReceiver(t *testing.T) (*httptest.Server, <-chan delivered) {
	t.Helper()
	got := make(chan delivered, 32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- delivered{header: r.Header.Clone(), body: body}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// next waits for the receiver's next delivery (the test's deadline bounds
// the wait: delivery runs in the background of the service).
func next(t *testing.T, got <-chan delivered) delivered {
	t.Helper()
	select {
	case d := <-got:
		return d
	case <-t.Context().Done():
		t.Fatal("no delivery arrived")
		return delivered{}
	}
}

// testWebhooks: a service client manages an endpoint, and VerifyWebhook
// accepts what the service delivers to a receiver on loopback, under
// either secret while a rotation overlaps, and refuses it under another.
func (g *goSuite) testWebhooks(t *testing.T) {
	f := g.newWireInAccount(t, "go-webhooks")
	f.addClient(client.ScopeConversationsRead, client.ScopeConversationsWrite, client.ScopeWebhooksManage)
	c := f.serviceClient(t, nil)
	ctx := context.Background()
	srv, got := webhookReceiver(t)

	w, err := c.CreateWebhook(ctx, client.NewWebhook{URL: srv.URL + "/hook", Description: "go suite"})
	if err != nil || !strings.HasPrefix(w.Secret, "whsec_") || !w.Enabled || len(w.Events) != 1 || w.Events[0] != "*" {
		t.Fatalf("create: %+v %v", w, err)
	}
	if again, err := c.GetWebhook(ctx, w.ID); err != nil || again.Secret != "" || again.URL != w.URL {
		t.Fatalf("get: %+v %v", again, err)
	}
	var listed []string
	for x, err := range c.Webhooks(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, x.ID)
	}
	if !slices.Equal(listed, []string{w.ID}) {
		t.Fatalf("listed %v", listed)
	}
	desc := "renamed"
	if u, err := c.UpdateWebhook(ctx, w.ID, client.WebhookPatch{Description: &desc}); err != nil || u.Description != desc || !u.Enabled {
		t.Fatalf("update: %+v %v", u, err)
	}

	// A test event, verified as delivered.
	d, err := c.TestWebhook(ctx, w.ID)
	if err != nil || d.State != client.DeliveryPending {
		t.Fatalf("test: %+v %v", d, err)
	}
	in := next(t, got)
	ev, err := client.VerifyWebhook([]string{w.Secret}, in.header, in.body)
	if err != nil || ev.ID != d.EventID || ev.Type != client.EventWebhookTest || ev.Sequence != 0 || ev.Data.EndpointID != w.ID {
		t.Fatalf("verify: %+v %v", ev, err)
	}
	if _, err := client.VerifyWebhook([]string{client.NewIdempotencyKey()}, in.header, in.body); !errors.Is(err, client.ErrWebhookSecret) {
		t.Fatalf("a secret that is not base64: %v", err)
	}
	other := "whsec_" + strings.Repeat("A", 43) + "="
	var werr *client.WebhookError
	if _, err := client.VerifyWebhook([]string{other}, in.header, in.body); !errors.As(err, &werr) || !errors.Is(err, client.ErrWebhookSignature) {
		t.Fatalf("another secret: %v", err)
	}

	// A real event of the account, in the order of its sequence.
	conv, err := c.CreateConversation(ctx, client.NewConversation{Subject: "hooked", Participants: []string{userID("ann")}})
	if err != nil {
		t.Fatal(err)
	}
	in = next(t, got)
	ev, err = client.VerifyWebhook([]string{w.Secret}, in.header, in.body)
	if err != nil || ev.Type != client.EventConversationCreated || ev.Sequence <= 0 || ev.Data.Conversation.ID != conv.ID {
		t.Fatalf("conversation.created: %+v %v", ev, err)
	}

	// During a rotation's overlap each secret verifies alone.
	rotated, err := c.RotateWebhookSecret(ctx, w.ID, time.Hour)
	if err != nil || rotated == w.Secret {
		t.Fatalf("rotate: %v", err)
	}
	if _, err := c.TestWebhook(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	in = next(t, got)
	for _, s := range []string{w.Secret, rotated} {
		if _, err := client.VerifyWebhook([]string{s}, in.header, in.body); err != nil {
			t.Fatalf("during the overlap, one of the secrets: %v", err)
		}
	}
	if n := len(strings.Fields(in.header.Get("webhook-signature"))); n != 2 {
		t.Fatalf("%d signatures during the overlap", n)
	}

	// The log, and a retry with the same webhook-id.
	var log []client.WebhookDelivery
	for x, err := range c.WebhookDeliveries(ctx, w.ID) {
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, x)
	}
	if len(log) != 3 || log[2].ID != d.ID {
		t.Fatalf("deliveries %+v", log)
	}
	waitSucceeded(t, c, w.ID, d.ID)
	if err := c.RetryWebhookDelivery(ctx, w.ID, d.ID); err != nil {
		t.Fatal(err)
	}
	if in = next(t, got); in.header.Get("webhook-id") != d.EventID {
		t.Fatalf("retry carried webhook-id %q, want %q", in.header.Get("webhook-id"), d.EventID)
	}

	if err := c.DeleteWebhook(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetWebhook(ctx, w.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if _, err := c.CreateWebhook(ctx, client.NewWebhook{URL: "ftp://example.com/"}); !errors.Is(err, client.ErrValidationFailed) {
		t.Fatalf("ftp URL: %v", err)
	}
}

func waitSucceeded(t *testing.T, c *client.Client, endpointID, deliveryID string) {
	t.Helper()
	for {
		page, err := c.ListWebhookDeliveriesPage(context.Background(), endpointID, 100, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Deliveries {
			if d.ID == deliveryID && d.State == client.DeliverySucceeded {
				return
			}
		}
		select {
		case <-t.Context().Done():
			t.Fatal("the delivery never succeeded")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// webhookVector is one case of clients/testdata/webhook-vectors.json:
// a delivery signed by the official Standard Webhooks library, the
// secrets a verifier is given, the time it verifies at, and the outcome
// every client's verify must reach ("ok", or the kind of refusal:
// "signature", "timestamp", "headers", "payload").
type webhookVector struct {
	Name    string            `json:"name"`
	Secrets []string          `json:"secrets"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Now     int64             `json:"now"`
	Expect  string            `json:"expect"`
}

const vectorsFile = "../../clients/testdata/webhook-vectors.json"

// officialVectors builds the vectors with the official Go library: its
// Sign makes every signature.
func officialVectors(t *testing.T) []webhookVector {
	t.Helper()
	const (
		secretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw2YkBJ0eJ+Ic="
		secretB = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
		id      = "evt_5d41402abc4b2a76b9719d91"
		ts      = int64(1767268800) // 2026-01-01T12:00:00Z
	)
	body := `{"id":"evt_5d41402abc4b2a76b9719d91","type":"message.created","sequence":7,"timestamp":"2026-01-01T12:00:00.000Z","data":{"conversation":{"id":"cnv_3f9a1c2e9b1d4a0f8c3e2a71","subject":"Hi","status":"open","participants":["usr_9f86d081884c7d659a2feaa0"],"createdAt":"2026-01-01T11:00:00.000Z","updatedAt":"2026-01-01T12:00:00.000Z","lastMessageAt":"2026-01-01T12:00:00.000Z"},"message":{"id":"msg_5d41402abc4b2a76b9719d91","conversationId":"cnv_3f9a1c2e9b1d4a0f8c3e2a71","author":"usr_9f86d081884c7d659a2feaa0","body":"héllo","metadata":{},"createdAt":"2026-01-01T12:00:00.000Z"}}}`
	sign := func(secret, id string, ts int64, body string) string {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := wh.Sign(id, time.Unix(ts, 0), []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	headers := func(sig string) map[string]string {
		return map[string]string{"webhook-id": id, "webhook-timestamp": "1767268800", "webhook-signature": sig}
	}
	sigA, sigB := sign(secretA, id, ts, body), sign(secretB, id, ts, body)
	return []webhookVector{
		{"one secret", []string{secretA}, headers(sigA), body, ts + 10, "ok"},
		{"several secrets, the second signed", []string{secretB, secretA}, headers(sigA), body, ts, "ok"},
		{"two signatures during a rotation, old secret", []string{secretA}, headers(sigB + " " + sigA), body, ts, "ok"},
		{"two signatures during a rotation, new secret", []string{secretB}, headers(sigB + " " + sigA), body, ts, "ok"},
		{"an unknown version beside v1", []string{secretA}, headers("v2,abc " + sigA), body, ts, "ok"},
		{"4:59 late", []string{secretA}, headers(sigA), body, ts + 299, "ok"},
		{"another secret", []string{secretB}, headers(sigA), body, ts, "signature"},
		{"the body changed", []string{secretA}, headers(sigA), strings.Replace(body, "héllo", "hello", 1), ts, "signature"},
		{"the id changed", []string{secretA}, map[string]string{"webhook-id": "evt_000000000000000000000000", "webhook-timestamp": "1767268800", "webhook-signature": sigA}, body, ts, "signature"},
		{"signed for another timestamp", []string{secretA}, map[string]string{"webhook-id": id, "webhook-timestamp": "1767268801", "webhook-signature": sigA}, body, ts, "signature"},
		{"only an unknown version", []string{secretA}, headers("v1a," + strings.TrimPrefix(sigA, "v1,")), body, ts, "signature"},
		{"more than 5 minutes old", []string{secretA}, headers(sigA), body, ts + 301, "timestamp"},
		{"more than 5 minutes ahead", []string{secretA}, headers(sigA), body, ts - 301, "timestamp"},
		{"no signature header", []string{secretA}, map[string]string{"webhook-id": id, "webhook-timestamp": "1767268800"}, body, ts, "headers"},
		{"a timestamp that is not a number", []string{secretA}, map[string]string{"webhook-id": id, "webhook-timestamp": "soon", "webhook-signature": sigA}, body, ts, "headers"},
		{"signed, but not an event", []string{secretA}, headers(sign(secretA, id, ts, `[1,2]`)), `[1,2]`, ts, "payload"},
	}
}

// TestWebhookVectorsAreTheOfficialLibrarys: the vectors every client's
// suite verifies (the JS, Python and PHP suites read the file) are the
// official Go library's signatures; UPDATE_WEBHOOK_VECTORS=1 writes them.
// The Go client's verifier is held to each vector's outcome here.
func TestWebhookVectorsAreTheOfficialLibrarys(t *testing.T) {
	vectors := officialVectors(t)
	want, err := json.MarshalIndent(vectors, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if os.Getenv("UPDATE_WEBHOOK_VECTORS") == "1" {
		if err := os.MkdirAll(filepath.Dir(vectorsFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorsFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(vectorsFile)
	if err != nil || string(have) != string(want) {
		t.Fatalf("%s is not what the official library signs (%v): run UPDATE_WEBHOOK_VECTORS=1 go test -run TestWebhookVectors ./deploy/clientstest", vectorsFile, err)
	}
	kinds := map[string]error{
		"signature": client.ErrWebhookSignature, "timestamp": client.ErrWebhookTimestamp,
		"headers": client.ErrWebhookHeaders, "payload": client.ErrWebhookPayload,
	}
	for _, v := range vectors {
		h := http.Header{}
		for k, val := range v.Headers {
			h.Set(k, val)
		}
		_, err := client.VerifyWebhookAt(v.Secrets, h, []byte(v.Body), time.Unix(v.Now, 0))
		switch {
		case v.Expect == "ok" && err != nil:
			t.Errorf("%s: %v", v.Name, err)
		case v.Expect != "ok" && !errors.Is(err, kinds[v.Expect]):
			t.Errorf("%s: %v, want %s", v.Name, err, v.Expect)
		}
	}
	// And one signed now, verified at the real clock.
	wh, _ := standardwebhooks.NewWebhook(vectors[0].Secrets[0])
	now := time.Now()
	sig, _ := wh.Sign(vectors[0].Headers["webhook-id"], now, []byte(vectors[0].Body))
	h := http.Header{"Webhook-Id": {vectors[0].Headers["webhook-id"]}, "Webhook-Timestamp": {strconv.FormatInt(now.Unix(), 10)}, "Webhook-Signature": {sig}}
	if ev, err := client.VerifyWebhook(vectors[0].Secrets, h, []byte(vectors[0].Body)); err != nil || ev.Type != "message.created" || ev.Data.Message == nil || ev.Data.Message.Body != "héllo" {
		t.Fatalf("signed now: %+v %v", ev, err)
	}
}
