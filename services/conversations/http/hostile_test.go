package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/testkit/hostile"
	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/testkit/openapitest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
	"github.com/acme/platform/services/conversations/cursor"
	conversationshttp "github.com/acme/platform/services/conversations/http"
	"github.com/acme/platform/services/conversations/mongostore"
)

// TestHostileRequests sends the hostile families, generated from
// the OpenAPI document, to every operation of the conversations service
// (its handler on the embedded store, with its access log and metrics):
// no 5xx, every error problem+json, nothing internal in a body, and the
// client, the log and the metrics agreeing.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	store := mongostore.New(mongotest.New(t))
	if err := store.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	tokens := tokentest.New(t, tokentest.Options{Alg: token.AlgES256, Issuer: issuerURL, Audience: []string{audience}})
	cursors, _ := cursor.New([]byte(strings.Repeat("k", 32)))
	var log hostile.Log
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(conversationshttp.NewHandler(conversationshttp.Deps{
		Logger: log.Logger(), Metrics: reg, Store: store, Cursors: cursors, Verifier: tokens.Verifier,
		// A stream that a hostile request opens ends at once, so that its
		// answer can be read whole.
		Stream: conversationshttp.StreamConfig{MaxDuration: time.Millisecond},
	}))
	t.Cleanup(srv.Close)
	a := &api{t: t, srv: srv, doc: openapitest.Load(t, conversationshttp.OpenAPI), tokens: tokens, store: store}

	alice := a.user("acc_hostile", "alice")
	c := a.create(alice, `{"participants":["`+uid("bob")+`"],"subject":"hostile"}`)
	m := a.post(alice, c.ID, `{"body":"hello"}`)

	tg := hostile.Target{
		Doc: a.doc, URL: srv.URL, Client: &http.Client{}, Bearer: alice,
		PathValues: map[string]string{"id": c.ID, "userId": uid("bob"), "messageId": m.ID},
		Log:        log.Bytes, Metrics: reg,
	}
	// The webhook routes are a service client's with webhooks:manage and
	// conversations:read (a user's token stops at 403): their cases go
	// with such a token and ids of an endpoint and a delivery that exist.
	webhooks := func(c hostile.Case) bool { return strings.HasPrefix(c.Op.Path, "/v1/webhooks") }
	var others []hostile.Case
	for _, c := range hostile.Cases(tg) {
		if !webhooks(c) {
			others = append(others, c)
		}
	}
	hostile.Run(t, tg, others)

	manager := a.webhookManager("acc_hostile")
	w := a.createWebhook(manager, `{"url":"https://hooks.example.com/in"}`)
	var d delivery
	json.Unmarshal(a.send("POST", "/v1/webhooks/"+w.ID+"/test", manager, "", true).body, &d)
	th := tg
	th.Bearer = manager
	th.PathValues = map[string]string{"id": w.ID, "deliveryId": d.ID}
	var hooks []hostile.Case
	for _, c := range hostile.Cases(th) {
		if webhooks(c) {
			hooks = append(hooks, c)
		}
	}
	if len(hooks) == 0 {
		t.Fatal("no hostile case for the webhook routes")
	}
	hostile.Run(t, th, hooks)
}
