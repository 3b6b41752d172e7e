package http_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/testkit/hostile"
	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/testkit/openapitest"
	accounthttp "github.com/acme/platform/services/account/http"
	"github.com/acme/platform/services/account/mongostore"
)

// TestHostileRequests sends issue 19's hostile families, generated from
// the OpenAPI document, to every operation of the account service (its
// handler on the embedded store, with its access log and metrics): no
// 5xx, every error problem+json (RFC 6749 JSON on /oauth2/*), nothing
// internal in a body, and the client, the log and the metrics agreeing.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := mongostore.New(mongotest.New(t))
	if err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	hasher := cheapHasher(t)
	kit := newTokenKit(t, "RS256")
	var log hostile.Log
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(accounthttp.NewHandler(accounthttp.Deps{
		Logger:      log.Logger(),
		Metrics:     reg,
		Sessions:    kit.sessions(store, hasher, nil),
		Definitions: store,
		Verifier:    kit.verifier,
		Keys:        kit.keys,
		IssuerURL:   issuerURL,
	}))
	t.Cleanup(srv.Close)
	acc, err := store.CreateAccount(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := hasher.Hash(ctx, "alice-password")
	if _, err := store.CreateUser(ctx, acc.ID, "alice", hash); err != nil {
		t.Fatal(err)
	}
	a := &api{t: t, srv: srv, doc: openapitest.Load(t, accounthttp.OpenAPI), store: store, keys: kit.ring, verifier: kit.verifier}
	set := a.login("acme", "alice", "alice-password")
	created := a.call("POST", "/definitions", set.IDToken, `{"name":"hostile","type":"salesforce","config":{"url":"https://example.com"}}`)
	var def struct {
		ID string `json:"id"`
	}
	created.json(t, &def)

	tg := hostile.Target{
		Doc: a.doc, URL: srv.URL, Client: &http.Client{}, Bearer: set.IDToken,
		PathValues: map[string]string{"id": def.ID},
		Log:        log.Bytes, Metrics: reg,
	}
	hostile.Run(t, tg, hostile.Cases(tg))
}
