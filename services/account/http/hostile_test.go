package http_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/testkit/hostile"
	"github.com/acme/platform/pkg/testkit/openapitest"
	"github.com/acme/platform/pkg/token"
	accounthttp "github.com/acme/platform/services/account/http"
)

// TestHostileRequests sends the hostile families, generated from
// the OpenAPI document, to every operation of the account service (its
// handler on the embedded store, with its access log and metrics): no
// 5xx, every error problem+json (RFC 6749 JSON on /oauth2/*), nothing
// internal in a body, and the client, the log and the metrics agreeing.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	hasher := cheapHasher(t)
	kit := newTokenKit(t, "RS256")
	sessions := kit.sessions(store, hasher, nil)
	users := userManagement(t, store, hasher, sessions)
	var log hostile.Log
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(accounthttp.NewHandler(kit.withAuthz(store, accounthttp.Deps{
		Logger:      log.Logger(),
		Metrics:     reg,
		Sessions:    sessions,
		Users:       users,
		MFA:         sessions.MFA,
		Definitions: store,
		Verifier:    kit.verifier,
		Keys:        kit.keys,
		IssuerURL:   issuerURL,
	})))
	t.Cleanup(srv.Close)
	acc, err := store.CreateAccount(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	alice := addUser(t, store, hasher, acc.ID, "alice", "alice-password")
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
	// The users' routes are a service client's: they get a client token
	// with both users scopes and a user's id; every other route the
	// user's token.
	backend, err := kit.issuer.MintClient(ctx, token.Client{
		ClientID: "cli_hostile", AccountID: acc.ID, AccountName: acc.Name, Scopes: []string{token.ScopeUsersRead, token.ScopeUsersWrite},
	})
	if err != nil {
		t.Fatal(err)
	}
	clientTarget := tg
	clientTarget.Bearer = backend.AccessToken
	clientTarget.PathValues = map[string]string{"id": alice.ID}
	var userCases, clientCases []hostile.Case
	for _, c := range hostile.Cases(tg) {
		if c.Op.Path != "/users" && !strings.HasPrefix(c.Op.Path, "/users/") {
			userCases = append(userCases, c)
		}
	}
	for _, c := range hostile.Cases(clientTarget) {
		if c.Op.Path == "/users" || strings.HasPrefix(c.Op.Path, "/users/") {
			clientCases = append(clientCases, c)
		}
	}
	hostile.Run(t, tg, userCases)
	hostile.Run(t, clientTarget, clientCases)
}
