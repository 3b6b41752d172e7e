package http_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/token"
	conversationshttp "github.com/acme/platform/services/conversations/http"
	wh "github.com/acme/platform/services/conversations/webhook"
	webhookdial "github.com/acme/platform/services/conversations/webhook/delivery"
)

// Webhook endpoints through the API: who may
// manage them, every bad input a 4xx problem that changes nothing, the
// secret shown only on create and rotate, paging, the deliveries log and
// the per-endpoint budget of test and retry. Delivery itself is proved
// against the binaries (deploy/e2e) and in package webhook.

type webhook struct {
	ID             string   `json:"id"`
	URL            string   `json:"url"`
	Events         []string `json:"events"`
	Description    string   `json:"description"`
	Enabled        bool     `json:"enabled"`
	DisabledReason *string  `json:"disabledReason"`
	Secret         string   `json:"secret"`
}

type delivery struct {
	ID        string `json:"id"`
	EventID   string `json:"eventId"`
	EventType string `json:"eventType"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
}

var secretForm = regexp.MustCompile(`^whsec_[A-Za-z0-9+/]{43}=$`)

// webhookManager is a token of a service client of accountID that may
// manage webhooks.
func (a *api) webhookManager(accountID string) string {
	return a.client(accountID, "cli_hooks_"+accountID, token.ScopeWebhooksManage, token.ScopeConversationsRead)
}

func (a *api) createWebhook(bearer, body string) webhook {
	a.t.Helper()
	r := a.send("POST", "/v1/webhooks", bearer, body, true)
	if r.status != http.StatusCreated {
		a.t.Fatalf("create webhook: %d %s", r.status, r.body)
	}
	var w webhook
	if err := json.Unmarshal(r.body, &w); err != nil {
		a.t.Fatal(err)
	}
	if loc := r.header.Get("Location"); loc != "/v1/webhooks/"+w.ID {
		a.t.Fatalf("Location %q for %s", loc, w.ID)
	}
	return w
}

func (a *api) listWebhooks(bearer string) []webhook {
	a.t.Helper()
	r := a.send("GET", "/v1/webhooks?limit=100", bearer, "", true)
	var list []webhook
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil {
		a.t.Fatalf("list webhooks: %d %s", r.status, r.body)
	}
	return list
}

func testWebhookEndpoints(t *testing.T, a *api) {
	mgr := a.webhookManager("acc_wh")
	w := a.createWebhook(mgr, `{"url":"https://hooks.example.com/in","events":["message.created"],"description":"crm"}`)
	if !secretForm.MatchString(w.Secret) || !w.Enabled || w.DisabledReason != nil || w.Description != "crm" {
		t.Fatalf("created %+v", w)
	}
	def := a.createWebhook(mgr, `{"url":"https://hooks.example.com/all"}`)
	if len(def.Events) != 1 || def.Events[0] != "*" {
		t.Fatalf("default events %v", def.Events)
	}
	// The secret is never shown again.
	r := a.send("GET", "/v1/webhooks/"+w.ID, mgr, "", true)
	if r.status != 200 || strings.Contains(string(r.body), "secret") || strings.Contains(string(r.body), w.Secret[6:]) {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	for _, x := range a.listWebhooks(mgr) {
		if x.Secret != "" {
			t.Fatalf("listed with its secret: %+v", x)
		}
	}
	// Paging: newest first, one per page.
	r = a.send("GET", "/v1/webhooks?limit=1", mgr, "", true)
	var page []webhook
	json.Unmarshal(r.body, &page)
	link := r.header.Get("Link")
	if len(page) != 1 || page[0].ID != def.ID || !strings.Contains(link, "cursor=") {
		t.Fatalf("first page %v, Link %q", page, link)
	}
	next := strings.TrimSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`)
	r = a.send("GET", next, mgr, "", true)
	json.Unmarshal(r.body, &page)
	if len(page) != 1 || page[0].ID != w.ID || r.header.Get("Link") != "" {
		t.Fatalf("second page %v, Link %q", page, r.header.Get("Link"))
	}
	// A cursor of this listing is not one of another caller's.
	other := a.webhookManager("acc_wh_other")
	a.send("GET", next, other, "", false).problem(t, 400, "validation_failed", "cursor")

	// Merge patch.
	r = a.do(exchange{method: "PATCH", path: "/v1/webhooks/" + w.ID, bearer: mgr, contentType: "application/merge-patch+json",
		body: `{"enabled":false,"events":["*"],"description":"off"}`})
	var patched webhook
	json.Unmarshal(r.body, &patched)
	if r.status != 200 || patched.Enabled || patched.Events[0] != "*" || patched.Description != "off" || patched.URL != w.URL {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}

	// Rotation returns a new secret, default overlap or a chosen one.
	for _, body := range []string{"", `{"overlap":0}`, `{"overlap":3600}`} {
		x := exchange{method: "POST", path: "/v1/webhooks/" + w.ID + "/rotate-secret", bearer: mgr, body: body}
		r = a.do(x)
		var s struct{ Secret string }
		json.Unmarshal(r.body, &s)
		if r.status != 200 || !secretForm.MatchString(s.Secret) || s.Secret == w.Secret {
			t.Fatalf("rotate %q: %d %s", body, r.status, r.body)
		}
	}

	// Test event: a pending delivery in the log; retry it.
	r = a.send("POST", "/v1/webhooks/"+def.ID+"/test", mgr, "", true)
	var d delivery
	json.Unmarshal(r.body, &d)
	if r.status != 202 || d.State != "pending" || d.EventType != "webhook.test" || !strings.HasPrefix(d.EventID, "evt_") {
		t.Fatalf("test: %d %s", r.status, r.body)
	}
	r = a.send("GET", "/v1/webhooks/"+def.ID+"/deliveries", mgr, "", true)
	var log []delivery
	json.Unmarshal(r.body, &log)
	if r.status != 200 || len(log) != 1 || log[0].ID != d.ID || log[0].Attempts != 0 {
		t.Fatalf("deliveries: %d %s", r.status, r.body)
	}
	if r := a.send("POST", "/v1/webhooks/"+def.ID+"/deliveries/"+d.ID+"/retry", mgr, "", true); r.status != 202 {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	a.send("POST", "/v1/webhooks/"+w.ID+"/deliveries/"+d.ID+"/retry", mgr, "", true).problem(t, 404, "not_found", "")
	// Deliveries paging.
	a.send("POST", "/v1/webhooks/"+def.ID+"/test", mgr, "", true)
	r = a.send("GET", "/v1/webhooks/"+def.ID+"/deliveries?limit=1", mgr, "", true)
	if !strings.Contains(r.header.Get("Link"), "/deliveries?") {
		t.Fatalf("deliveries Link %q", r.header.Get("Link"))
	}
	next = strings.TrimSuffix(strings.TrimPrefix(r.header.Get("Link"), "<"), `>; rel="next"`)
	if r := a.send("GET", next, mgr, "", true); r.status != 200 {
		t.Fatalf("deliveries page 2: %d", r.status)
	}
	// The cursor of one endpoint's log is not one of another's.
	a.send("GET", strings.Replace(next, def.ID, w.ID, 1), mgr, "", false).problem(t, 400, "validation_failed", "cursor")

	// Delete.
	if r := a.send("DELETE", "/v1/webhooks/"+w.ID, mgr, "", true); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	a.send("GET", "/v1/webhooks/"+w.ID, mgr, "", true).problem(t, 404, "not_found", "")
	a.send("DELETE", "/v1/webhooks/"+w.ID, mgr, "", true).problem(t, 404, "not_found", "")
}

// testWebhookScopes: only a service client with both scopes; a user's
// token, or a client missing either scope, is a 403 naming both.
func testWebhookScopes(t *testing.T, a *api) {
	id := "whk_3f9a1c2e9b1d4a0f8c3e2a71"
	routes := []exchange{
		{method: "POST", path: "/v1/webhooks", body: `{"url":"https://x.example.com/"}`},
		{method: "GET", path: "/v1/webhooks"},
		{method: "GET", path: "/v1/webhooks/" + id},
		{method: "PATCH", path: "/v1/webhooks/" + id, body: `{"enabled":false}`, contentType: "application/merge-patch+json"},
		{method: "DELETE", path: "/v1/webhooks/" + id},
		{method: "POST", path: "/v1/webhooks/" + id + "/rotate-secret"},
		{method: "POST", path: "/v1/webhooks/" + id + "/test"},
		{method: "GET", path: "/v1/webhooks/" + id + "/deliveries"},
		{method: "POST", path: "/v1/webhooks/" + id + "/deliveries/dlv_5d41402abc4b2a76b9719d91/retry"},
	}
	for name, bearer := range map[string]string{
		"user":               a.user("acc_whs", "alice"),
		"conversations only": a.client("acc_whs", "cli_a", token.ScopeConversationsRead, token.ScopeConversationsWrite),
		"webhooks only":      a.client("acc_whs", "cli_b", token.ScopeWebhooksManage),
	} {
		for _, x := range routes {
			x.bearer = bearer
			r := a.do(x)
			r.problem(t, 403, "insufficient_scope", "")
			if got := r.header.Get("WWW-Authenticate"); got != `Bearer error="insufficient_scope", scope="webhooks:manage conversations:read"` {
				t.Fatalf("%s %s %s: WWW-Authenticate %q", name, x.method, x.path, got)
			}
		}
	}
	for _, x := range routes {
		x.invalid = true
		a.do(x).problem(t, 401, "invalid_token", "")
	}
	if got := a.listWebhooks(a.webhookManager("acc_whs")); len(got) != 0 {
		t.Fatalf("refused requests created %v", got)
	}
}

// testWebhookBadInput: every bad input to every operation is a 4xx
// problem naming the field, and changes nothing.
func testWebhookBadInput(t *testing.T, a *api) {
	mgr := a.webhookManager("acc_whb")
	w := a.createWebhook(mgr, `{"url":"https://hooks.example.com/in"}`)
	before := a.send("GET", "/v1/webhooks/"+w.ID, mgr, "", true).body
	for _, c := range []struct{ body, field string }{
		{`{}`, "url"},
		{`{"url":"not a url"}`, "url"},
		{`{"url":"hooks.example.com/in"}`, "url"},
		{`{"url":"ftp://hooks.example.com/in"}`, "url"},
		{`{"url":"http://hooks.example.com/in"}`, "url"},
		{`{"url":"https://user:pw@hooks.example.com/in"}`, "url"},
		{`{"url":"https://hooks.example.com/in#frag"}`, "url"},
		{`{"url":"https:///path"}`, "url"},
		{`{"url":"https://hooks.example.com:0/"}`, "url"},
		{`{"url":"https://hooks.example.com/` + strings.Repeat("a", 2048) + `"}`, "url"},
		{`{"url":42}`, "url"},
		{`{"url":"https://hooks.example.com/","events":["conversation.deleted"]}`, "events"},
		{`{"url":"https://hooks.example.com/","events":[]}`, "events"},
		{`{"url":"https://hooks.example.com/","events":["*","message.created"]}`, "events"},
		{`{"url":"https://hooks.example.com/","events":["message.created","message.created"]}`, "events"},
		{`{"url":"https://hooks.example.com/","events":["webhook.test"]}`, "events"},
		{`{"url":"https://hooks.example.com/","events":"*"}`, "events"},
		{`{"url":"https://hooks.example.com/","description":"` + strings.Repeat("d", 501) + `"}`, "description"},
		{`{"url":"https://hooks.example.com/","enabled":"yes"}`, "enabled"},
	} {
		a.send("POST", "/v1/webhooks", mgr, c.body, false).problem(t, 400, "validation_failed", c.field)
	}
	a.send("POST", "/v1/webhooks", mgr, `{"url":`, false).problem(t, 400, "malformed_json", "")
	a.do(exchange{method: "POST", path: "/v1/webhooks", bearer: mgr, body: `{"url":"https://a.example.com/"}`, contentType: "text/plain", invalid: true}).
		problem(t, 415, "unsupported_media_type", "")
	a.send("POST", "/v1/webhooks", mgr, `{"url":"https://a.example.com/","description":"`+strings.Repeat("x", 70<<10)+`"}`, false).
		problem(t, 413, "body_too_large", "")

	patch := func(body string) response {
		return a.do(exchange{method: "PATCH", path: "/v1/webhooks/" + w.ID, bearer: mgr, contentType: "application/merge-patch+json", body: body, invalid: true})
	}
	for _, c := range []struct{ body, field string }{
		{`{"url":"ftp://x.example.com/"}`, "url"},
		{`{"url":null}`, "url"},
		{`{"events":["nope"]}`, "events"},
		{`{"events":null}`, "events"},
		{`{"enabled":1}`, "enabled"},
		{`{"description":5}`, "description"},
	} {
		patch(c.body).problem(t, 400, "validation_failed", c.field)
	}
	a.do(exchange{method: "PATCH", path: "/v1/webhooks/" + w.ID, bearer: mgr, body: `{"enabled":false}`, invalid: true}).
		problem(t, 415, "unsupported_media_type", "")
	patch(`{"description":"`+strings.Repeat("x", 70<<10)+`"}`).problem(t, 413, "body_too_large", "")

	rotate := func(body string) response {
		return a.do(exchange{method: "POST", path: "/v1/webhooks/" + w.ID + "/rotate-secret", bearer: mgr, body: body, invalid: true})
	}
	rotate(`{"overlap":-1}`).problem(t, 400, "validation_failed", "overlap")
	rotate(`{"overlap":604801}`).problem(t, 400, "validation_failed", "overlap")
	rotate(`{"overlap":"1h"}`).problem(t, 400, "validation_failed", "overlap")
	rotate(`{"overlap":`+strings.Repeat(" ", 70<<10)+`1}`).problem(t, 413, "body_too_large", "")
	a.do(exchange{method: "POST", path: "/v1/webhooks/" + w.ID + "/rotate-secret", bearer: mgr, body: `{}`, contentType: "text/plain", invalid: true}).
		problem(t, 415, "unsupported_media_type", "")

	a.send("GET", "/v1/webhooks?limit=0", mgr, "", false).problem(t, 400, "validation_failed", "limit")
	a.send("GET", "/v1/webhooks?cursor=bogus", mgr, "", false).problem(t, 400, "validation_failed", "cursor")
	a.send("GET", "/v1/webhooks/"+w.ID+"/deliveries?limit=101", mgr, "", false).problem(t, 400, "validation_failed", "limit")

	// Another account's endpoint, and ids of another form, do not exist.
	other := a.webhookManager("acc_whb_other")
	for _, x := range []exchange{
		{method: "GET", path: "/v1/webhooks/" + w.ID},
		{method: "PATCH", path: "/v1/webhooks/" + w.ID, body: `{"enabled":false}`, contentType: "application/merge-patch+json"},
		{method: "DELETE", path: "/v1/webhooks/" + w.ID},
		{method: "POST", path: "/v1/webhooks/" + w.ID + "/rotate-secret"},
		{method: "POST", path: "/v1/webhooks/" + w.ID + "/test"},
		{method: "GET", path: "/v1/webhooks/" + w.ID + "/deliveries"},
		{method: "POST", path: "/v1/webhooks/" + w.ID + "/deliveries/dlv_000000000000000000000000/retry"},
		{method: "GET", path: "/v1/webhooks/whk_1"},
		{method: "GET", path: "/v1/webhooks/cnv_3f9a1c2e9b1d4a0f8c3e2a71"},
	} {
		x.bearer = other
		a.do(x).problem(t, 404, "not_found", "")
	}
	a.send("POST", "/v1/webhooks/"+w.ID+"/deliveries/nope/retry", mgr, "", true).problem(t, 404, "not_found", "")

	if after := a.send("GET", "/v1/webhooks/"+w.ID, mgr, "", true).body; string(after) != string(before) {
		t.Fatalf("bad input changed the endpoint:\n%s\n%s", before, after)
	}
	if got := a.listWebhooks(mgr); len(got) != 1 {
		t.Fatalf("bad input created endpoints: %v", got)
	}
}

// testWebhookURLAddresses: a URL naming an address the dialler refuses
// (under production defaults, and with loopback allowed as the dev stack
// configures it) is a 400 on url at registration and in a PATCH, and
// changes nothing; a host name is judged only when dialling.
func testWebhookURLAddresses(t *testing.T, a *api) {
	allowed, err := webhookdial.ParseAllowedCIDRs([]string{"127.0.0.0/8", "::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	dev := serve(t, a.tokens, a.doc, func(d *conversationshttp.Deps) {
		box, err := wh.NewSecretBox([]byte(strings.Repeat("k", 32)))
		if err != nil {
			t.Fatal(err)
		}
		d.Webhooks = &wh.Service{
			Store: d.Store.(wh.Store), Events: d.Store, Box: box,
			URLs: wh.URLPolicy{AllowHTTP: true, Dialable: webhookdial.NewDialer(allowed, nil).Check},
		}
	})
	for _, c := range []struct {
		host          string
		production, d bool // accepted under production defaults, in the dev stack
	}{
		{"127.0.0.1", false, true},
		{"127.0.0.2:8443", false, true},
		{"[::1]", false, true},
		{"0.0.0.0", false, false},
		{"[::ffff:127.0.0.1]", false, true}, // dialled as 127.0.0.1
		{"[::ffff:10.0.0.1]", false, false},
		{"[::]", false, false},
		{"10.0.0.1", false, false},
		{"169.254.169.254", false, false},
		{"[fd00:ec2::254]", false, false},
		{"[fe80::1%25eth0]", false, false},
		{"[64:ff9b::7f00:1]", false, false},
		{"93.184.215.14", true, true},
		{"[2606:4700:4700::1111]", true, true},
		{"[::ffff:93.184.215.14]", true, true},
		{"localhost", true, true}, // a name: checked when dialling
		{"hooks.example.com", true, true},
	} {
		for _, env := range []struct {
			name   string
			api    *api
			accept bool
		}{{"production", a, c.production}, {"dev", dev, c.d}} {
			mgr := env.api.webhookManager("acc_whaddr")
			url := "https://" + c.host + "/in"
			r := env.api.send("POST", "/v1/webhooks", mgr, `{"url":"`+url+`"}`, env.accept)
			if !env.accept {
				r.problem(t, 400, "validation_failed", "url")
				continue
			}
			if r.status != http.StatusCreated {
				t.Errorf("%s: %s refused: %d %s", env.name, url, r.status, r.body)
				continue
			}
			var w webhook
			if err := json.Unmarshal(r.body, &w); err != nil {
				t.Fatal(err)
			}
			env.api.send("DELETE", "/v1/webhooks/"+w.ID, mgr, "", true)
		}
	}
	if got := a.listWebhooks(a.webhookManager("acc_whaddr")); len(got) != 0 {
		t.Fatalf("refused URLs created endpoints: %v", got)
	}

	// PATCH of url: the same rule, and the endpoint stays as it was.
	mgr := a.webhookManager("acc_whaddr")
	w := a.createWebhook(mgr, `{"url":"https://hooks.example.com/in"}`)
	before := a.send("GET", "/v1/webhooks/"+w.ID, mgr, "", true).body
	for _, host := range []string{"127.0.0.1", "[::1]", "0.0.0.0", "[::ffff:127.0.0.1]"} {
		a.do(exchange{method: "PATCH", path: "/v1/webhooks/" + w.ID, bearer: mgr, contentType: "application/merge-patch+json",
			body: `{"url":"https://` + host + `/in","description":"changed"}`, invalid: true}).problem(t, 400, "validation_failed", "url")
	}
	if after := a.send("GET", "/v1/webhooks/"+w.ID, mgr, "", true).body; string(after) != string(before) {
		t.Fatalf("a refused PATCH changed the endpoint:\n%s\n%s", before, after)
	}
}

// testWebhookLimits: the 21st endpoint is a 409 too_many_endpoints, and
// test and retry are limited per endpoint (429 with Retry-After).
func testWebhookLimits(t *testing.T, a *api) {
	mgr := a.webhookManager("acc_whl")
	var first webhook
	for i := range 20 {
		w := a.createWebhook(mgr, fmt.Sprintf(`{"url":"https://h%d.example.com/"}`, i))
		if i == 0 {
			first = w
		}
	}
	a.send("POST", "/v1/webhooks", mgr, `{"url":"https://h21.example.com/"}`, true).problem(t, 409, "too_many_endpoints", "")
	if n := len(a.listWebhooks(mgr)); n != 20 {
		t.Fatalf("%d endpoints after the refused 21st", n)
	}
	// Another account is not limited by this one's.
	a.createWebhook(a.webhookManager("acc_whl_other"), `{"url":"https://h.example.com/"}`)

	var d delivery
	for i := range 10 {
		r := a.send("POST", "/v1/webhooks/"+first.ID+"/test", mgr, "", true)
		if r.status != 202 {
			t.Fatalf("test %d: %d %s", i, r.status, r.body)
		}
		json.Unmarshal(r.body, &d)
	}
	r := a.send("POST", "/v1/webhooks/"+first.ID+"/test", mgr, "", true)
	r.problem(t, 429, "too_many_requests", "")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	for range 10 {
		a.send("POST", "/v1/webhooks/"+first.ID+"/deliveries/"+d.ID+"/retry", mgr, "", true)
	}
	a.send("POST", "/v1/webhooks/"+first.ID+"/deliveries/"+d.ID+"/retry", mgr, "", true).problem(t, 429, "too_many_requests", "")
	r = a.send("GET", "/v1/webhooks/"+first.ID+"/deliveries?limit=100", mgr, "", true)
	var log []delivery
	json.Unmarshal(r.body, &log)
	if len(log) != 10 {
		t.Fatalf("%d deliveries after 10 tests and a refused one", len(log))
	}
}
