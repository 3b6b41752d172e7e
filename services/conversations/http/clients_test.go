package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/token"
)

// Service clients: access tokens of a client of an
// account, minted by the test issuer as the account service mints them.

// client returns an access token of service client clientID of accountID
// with scopes.
func (a *api) client(accountID, clientID string, scopes ...string) string {
	a.t.Helper()
	tok, err := a.tokens.Issuer.MintClient(context.Background(), token.Client{
		ClientID: clientID, AccountID: accountID, AccountName: accountID, Scopes: scopes,
	})
	if err != nil {
		a.t.Fatal(err)
	}
	return tok.AccessToken
}

// readWrite are both conversation scopes.
var readWrite = []string{token.ScopeConversationsRead, token.ScopeConversationsWrite}

// testClientReadsEveryConversation: with conversations:read a service
// client gets every conversation of its account, whoever takes part, and
// their messages; nothing of another account.
func testClientReadsEveryConversation(t *testing.T, a *api) {
	alice, bob := a.user("acc_cr", "alice"), a.user("acc_cr", "bob")
	mine := []string{
		a.create(alice, `{"subject":"alice alone"}`).ID,
		a.create(bob, `{"subject":"bob alone","status":"closed"}`).ID,
		a.create(alice, `{"subject":"both","participants":["`+uid("bob")+`"]}`).ID,
	}
	foreign := a.create(a.user("acc_cr_other", "alice"), `{"subject":"another account"}`)

	reader := a.client("acc_cr", "cli_reader", token.ScopeConversationsRead)
	list, next := a.page(reader, "/v1/conversations")
	if got, want := sortedIDs(list), sorted(mine); !slices.Equal(got, want) || next != "" {
		t.Fatalf("the client lists %v (next %q), want %v", got, next, want)
	}
	if closed, _ := a.page(reader, "/v1/conversations?status=closed"); len(closed) != 1 || closed[0].ID != mine[1] {
		t.Fatalf("status=closed: %v", ids(closed))
	}
	for _, id := range mine {
		if c, _ := a.get(reader, id); c.ID != id || slices.Contains(c.Participants, "cli_reader") {
			t.Fatalf("get %s: %+v", id, c)
		}
	}
	// Messages of a conversation the client takes no part in.
	a.post(alice, mine[0], `{"body":"first"}`)
	posted := a.post(alice, mine[0], `{"body":"hello"}`)
	path := "/v1/conversations/" + mine[0] + "/messages"
	if msgs, _ := a.messages(reader, path); len(msgs) != 2 || msgs[0].ID != posted.ID {
		t.Fatalf("messages: %+v", msgs)
	}
	if r := a.send("GET", path+"/"+posted.ID, reader, "", true); r.status != 200 || !strings.Contains(string(r.body), `"body":"hello"`) {
		t.Fatalf("get message: %d %s", r.status, r.body)
	}
	// Another account's conversation does not exist for it.
	for _, p := range []string{"/v1/conversations/" + foreign.ID, "/v1/conversations/" + foreign.ID + "/messages"} {
		a.send("GET", p, reader, "", true).problem(t, 404, "not_found", "")
	}
	// A user still sees only their own.
	if list, _ := a.page(bob, "/v1/conversations"); len(list) != 2 {
		t.Fatalf("bob sees %d conversations, want 2", len(list))
	}
}

// testClientPaging: the account-wide listing pages like a user's: every
// conversation exactly once, in order, across pages; filters and limit kept
// in the next link. A cursor is bound to the kind of caller: a user's is
// refused in a client's listing and the other way round, even for the same
// id, as is another client's.
func testClientPaging(t *testing.T, a *api) {
	const acc = "acc_cpage"
	created := map[string]bool{}
	for i := range 23 {
		u := a.user(acc, fmt.Sprint("u", i%5))
		status := []string{"open", "snoozed", "closed"}[i%3]
		created[a.create(u, fmt.Sprintf(`{"subject":"c%d","status":%q}`, i, status)).ID] = true
		a.create(a.user(acc+"_other", "u0"), `{}`)
	}
	reader := a.client(acc, "cli_pager", token.ScopeConversationsRead)
	var all []conversation
	next := "/v1/conversations?limit=5"
	pages := 0
	for next != "" {
		var list []conversation
		list, next = a.page(reader, next)
		if next != "" && !strings.Contains(next, "limit=5") {
			t.Fatalf("next link %q lost the limit", next)
		}
		all = append(all, list...)
		pages++
	}
	if pages != 5 || len(all) != 23 {
		t.Fatalf("%d pages, %d conversations; want 5 pages, 23", pages, len(all))
	}
	seen := map[string]bool{}
	for i, c := range all {
		if !created[c.ID] || seen[c.ID] {
			t.Fatalf("item %d (%s) unknown or repeated", i, c.ID)
		}
		seen[c.ID] = true
		if i > 0 && (c.UpdatedAt.After(all[i-1].UpdatedAt) || c.UpdatedAt.Equal(all[i-1].UpdatedAt) && c.ID > all[i-1].ID) {
			t.Fatalf("items %d and %d out of order", i-1, i)
		}
	}
	// A filtered listing keeps its filter.
	var sizes []int
	for next := "/v1/conversations?status=closed&limit=3"; next != ""; {
		var list []conversation
		list, next = a.page(reader, next)
		sizes = append(sizes, len(list))
		for _, c := range list {
			if c.Status != "closed" {
				t.Fatalf("status=closed listed %s", c.Status)
			}
		}
	}
	if fmt.Sprint(sizes) != "[3 3 1]" {
		t.Fatalf("closed pages %v, want [3 3 1]", sizes)
	}

	// Cursors do not cross kinds of caller, nor clients.
	_, clientNext := a.page(reader, "/v1/conversations?limit=2")
	sameID := a.user(acc, "cli_pager") // a user whose id is the client's
	_, userNext := a.page(a.user(acc, "u0"), "/v1/conversations?limit=2")
	if clientNext == "" || userNext == "" {
		t.Fatal("no next links")
	}
	a.send("GET", clientNext, sameID, "", false).problem(t, 400, "validation_failed", "cursor")
	a.send("GET", userNext, reader, "", false).problem(t, 400, "validation_failed", "cursor")
	a.send("GET", clientNext, a.client(acc, "cli_other", token.ScopeConversationsRead), "", false).problem(t, 400, "validation_failed", "cursor")
	if list, _ := a.page(a.client(acc, "cli_pager", token.ScopeConversationsRead), clientNext); len(list) != 2 {
		t.Fatalf("the client's own cursor with a new token: %d items", len(list))
	}
}

// testClientWrites: with conversations:write a service client creates a
// conversation it takes no part in (naming its participants), posts as
// itself, patches and changes participants; the users see the result.
func testClientWrites(t *testing.T, a *api) {
	const acc = "acc_cw"
	writer := a.client(acc, "cli_writer", token.ScopeConversationsWrite)
	r := a.send("POST", "/v1/conversations", writer, `{"subject":"from a backend","participants":["`+uid("alice")+`","`+uid("bob")+`","`+uid("alice")+`"]}`, true)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var conv conversation
	json.Unmarshal(r.body, &conv)
	if !slices.Equal(conv.Participants, []string{uid("alice"), uid("bob")}) || r.header.Get("Location") != "/v1/conversations/"+conv.ID ||
		r.header.Get("ETag") != `"1"` {
		t.Fatalf("created %+v, Location %q, ETag %q: want alice and bob only", conv, r.header.Get("Location"), r.header.Get("ETag"))
	}
	alice := a.user(acc, "alice")
	if got, _ := a.get(alice, conv.ID); got.Subject != "from a backend" {
		t.Fatalf("alice reads %+v", got)
	}
	if list, _ := a.page(alice, "/v1/conversations"); len(list) != 1 || list[0].ID != conv.ID {
		t.Fatalf("alice's list: %v", ids(list))
	}
	// A service client names every participant: none is a 400.
	for _, body := range []string{`{}`, `{"participants":[]}`} {
		a.send("POST", "/v1/conversations", writer, body, true).problem(t, 400, "validation_failed", "participants")
	}

	m := a.post(writer, conv.ID, `{"body":"report ready"}`)
	if m.Author != "cli_writer" {
		t.Fatalf("author = %q, want the client id", m.Author)
	}
	p := a.patch(writer, conv.ID, `{"subject":"renamed"}`, map[string]string{"If-Match": `"2"`})
	if p.status != 200 || p.header.Get("ETag") != `"3"` {
		t.Fatalf("patch: %d %s %v", p.status, p.body, p.header)
	}
	base := "/v1/conversations/" + conv.ID + "/participants/"
	if r := a.do(exchange{method: "PUT", path: base + uid("carol"), bearer: writer}); r.status != 204 {
		t.Fatalf("add carol: %d %s", r.status, r.body)
	}
	if r := a.do(exchange{method: "DELETE", path: base + uid("alice"), bearer: writer, header: map[string]string{"If-Match": `"4"`}}); r.status != 204 {
		t.Fatalf("remove alice: %d %s", r.status, r.body)
	}
	got, _ := a.get(a.user(acc, "carol"), conv.ID)
	if got.Subject != "renamed" || !slices.Equal(got.Participants, []string{uid("bob"), uid("carol")}) || got.LastMessageAt == nil {
		t.Fatalf("after the client's changes: %+v", got)
	}
	a.send("GET", "/v1/conversations/"+conv.ID, alice, "", true).problem(t, 404, "not_found", "")

	// A client changes a conversation created by users, too.
	users := a.create(a.user(acc, "dave"), `{"subject":"between users"}`)
	if r := a.patch(writer, users.ID, `{"status":"snoozed"}`, nil); r.status != 200 {
		t.Fatalf("patch a users' conversation: %d %s", r.status, r.body)
	}
	// But not one of another account.
	other := a.create(a.user(acc+"_other", "dave"), `{}`)
	a.patch(writer, other.ID, `{"status":"closed"}`, nil).problem(t, 404, "not_found", "")
	a.do(exchange{method: "POST", path: "/v1/conversations/" + other.ID + "/messages", bearer: writer, body: `{"body":"x"}`}).
		problem(t, 404, "not_found", "")
}

// testClientScopes: every route refuses a service client's token without
// its scope with 403 insufficient_scope and the RFC 6750 challenge naming
// the scope, and changes nothing; a user's token needs no scope.
func testClientScopes(t *testing.T, a *api) {
	const acc = "acc_cscope"
	u := a.user(acc, "alice")
	conv := a.create(u, `{"subject":"unchanged"}`)
	m := a.post(u, conv.ID, `{"body":"x"}`)
	_, tag := a.get(u, conv.ID)
	base := "/v1/conversations/" + conv.ID
	routes := []struct {
		x     exchange
		scope string
	}{
		{exchange{method: "GET", path: "/v1/conversations"}, token.ScopeConversationsRead},
		{exchange{method: "GET", path: base}, token.ScopeConversationsRead},
		{exchange{method: "GET", path: base + "/messages"}, token.ScopeConversationsRead},
		{exchange{method: "GET", path: base + "/messages/" + m.ID}, token.ScopeConversationsRead},
		{exchange{method: "GET", path: "/v1/events"}, token.ScopeConversationsRead},
		{exchange{method: "GET", path: "/v1/events/stream"}, token.ScopeConversationsRead},
		{exchange{method: "POST", path: "/v1/conversations", body: `{"participants":["` + uid("alice") + `"]}`}, token.ScopeConversationsWrite},
		{exchange{method: "PATCH", path: base, body: `{"subject":"changed"}`, contentType: "application/merge-patch+json"}, token.ScopeConversationsWrite},
		{exchange{method: "PUT", path: base + "/participants/" + uid("bob")}, token.ScopeConversationsWrite},
		{exchange{method: "DELETE", path: base + "/participants/" + uid("alice")}, token.ScopeConversationsWrite},
		{exchange{method: "POST", path: base + "/messages", body: `{"body":"x"}`}, token.ScopeConversationsWrite},
	}
	tokens := map[string]string{
		token.ScopeConversationsRead:  a.client(acc, "cli_reader", token.ScopeConversationsRead),
		token.ScopeConversationsWrite: a.client(acc, "cli_writer", token.ScopeConversationsWrite),
	}
	definitionsOnly := a.client(acc, "cli_defs", token.ScopeDefinitionsRead, token.ScopeDefinitionsWrite)
	for _, rt := range routes {
		// The token with the other conversations scope, and one with
		// none of them.
		other := token.ScopeConversationsRead
		if rt.scope == other {
			other = token.ScopeConversationsWrite
		}
		for name, bearer := range map[string]string{"only " + other: tokens[other], "definitions scopes": definitionsOnly} {
			x := rt.x
			x.bearer = bearer
			r := a.do(x)
			r.problem(t, 403, "insufficient_scope", "")
			if want := `Bearer error="insufficient_scope", scope="` + rt.scope + `"`; r.header.Get("WWW-Authenticate") != want {
				t.Errorf("%s %s with %s: WWW-Authenticate %q, want %q", x.method, x.path, name, r.header.Get("WWW-Authenticate"), want)
			}
		}
	}
	// Nothing changed, nothing was created.
	if got, now := a.get(u, conv.ID); now != tag || got.Subject != "unchanged" || !slices.Equal(got.Participants, []string{uid("alice")}) {
		t.Fatalf("a refused request changed the conversation: %+v %s", got, now)
	}
	if list, _ := a.page(a.client(acc, "cli_all", readWrite...), "/v1/conversations"); len(list) != 1 {
		t.Fatalf("%d conversations, want 1", len(list))
	}
	if msgs, _ := a.messages(u, base+"/messages"); len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
}

// testClientIdempotency: a service client's Idempotency-Keys are its own:
// its retry replays, while another client, or a user whose id equals the
// client's, using the same key creates its own.
func testClientIdempotency(t *testing.T, a *api) {
	const acc = "acc_cidem"
	c := a.client(acc, "cli_idem", readWrite...)
	key := map[string]string{"Idempotency-Key": "k1"}
	body := `{"subject":"once","participants":["` + uid("alice") + `"]}`
	first := a.do(exchange{method: "POST", path: "/v1/conversations", bearer: c, body: body, header: key})
	again := a.do(exchange{method: "POST", path: "/v1/conversations", bearer: a.client(acc, "cli_idem", readWrite...), body: body, header: key})
	if first.status != 201 || again.status != 201 || string(first.body) != string(again.body) ||
		again.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Location") != again.header.Get("Location") {
		t.Fatalf("replay:\n%d %s\n%d %s %v", first.status, first.body, again.status, again.body, again.header)
	}
	a.do(exchange{method: "POST", path: "/v1/conversations", bearer: c, body: `{"subject":"twice","participants":["` + uid("alice") + `"]}`, header: key}).
		problem(t, 422, "idempotency_key_reused", "")
	for name, bearer := range map[string]string{
		"another client":          a.client(acc, "cli_peer", readWrite...),
		"a user of the same name": a.user(acc, "cli_idem"),
	} {
		r := a.do(exchange{method: "POST", path: "/v1/conversations", bearer: bearer, body: body, header: key})
		if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" || string(r.body) == string(first.body) {
			t.Fatalf("%s with the same key: %d %s %v", name, r.status, r.body, r.header)
		}
	}
	var conv conversation
	json.Unmarshal(first.body, &conv)
	path := "/v1/conversations/" + conv.ID + "/messages"
	mkey := map[string]string{"Idempotency-Key": "m1"}
	m1 := a.do(exchange{method: "POST", path: path, bearer: c, body: `{"body":"hello"}`, header: mkey})
	m2 := a.do(exchange{method: "POST", path: path, bearer: c, body: `{"body":"hello"}`, header: mkey})
	if m1.status != 201 || string(m1.body) != string(m2.body) || m2.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("message replay:\n%s\n%s", m1.body, m2.body)
	}
	if msgs, _ := a.messages(c, path); len(msgs) != 1 {
		t.Fatalf("a retried post made %d messages", len(msgs))
	}
	if list, _ := a.page(c, "/v1/conversations?limit=100"); len(list) != 3 {
		t.Fatalf("%d conversations in the account, want 3 (one per caller)", len(list))
	}
}

func sortedIDs(list []conversation) []string { return sorted(ids(list)) }

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// testAmbiguousCredentials: a request with two Authorization headers is
// never authenticated, on every route, whatever they hold (even the same
// valid token twice): 400 invalid_request, and nothing changes.
func testAmbiguousCredentials(t *testing.T, a *api) {
	u := a.user("acc_ambiguous", "alice")
	conv := a.create(u, `{"subject":"unchanged"}`)
	m := a.post(u, conv.ID, `{"body":"x"}`)
	_, tag := a.get(u, conv.ID)
	base := "/v1/conversations/" + conv.ID
	other := a.client("acc_ambiguous", "cli_1", readWrite...)
	for _, x := range []exchange{
		{method: "GET", path: "/v1/conversations"},
		{method: "POST", path: "/v1/conversations", body: `{}`},
		{method: "GET", path: base},
		{method: "PATCH", path: base, body: `{"subject":"changed"}`, contentType: "application/merge-patch+json"},
		{method: "PUT", path: base + "/participants/" + uid("bob")},
		{method: "DELETE", path: base + "/participants/" + uid("alice")},
		{method: "POST", path: base + "/messages", body: `{"body":"x"}`},
		{method: "GET", path: base + "/messages"},
		{method: "GET", path: base + "/messages/" + m.ID},
	} {
		for name, second := range map[string]string{"the same token twice": u, "a user's and a client's": other} {
			var rd io.Reader
			if x.body != "" {
				rd = strings.NewReader(x.body)
			}
			req, _ := http.NewRequest(x.method, a.srv.URL+x.path, rd)
			if x.body != "" {
				ct := x.contentType
				if ct == "" {
					ct = "application/json"
				}
				req.Header.Set("Content-Type", ct)
			}
			req.Header.Add("Authorization", "Bearer "+u)
			req.Header.Add("Authorization", "Bearer "+second)
			resp, body := a.doc.DoResponseOnly(t, a.srv.Client(), req)
			r := response{resp.StatusCode, resp.Header, body}
			r.problem(t, 400, "invalid_request", "")
			if got := r.header.Get("WWW-Authenticate"); got != `Bearer error="invalid_request"` {
				t.Errorf("%s %s with %s: WWW-Authenticate %q", x.method, x.path, name, got)
			}
		}
	}
	if got, now := a.get(u, conv.ID); now != tag || got.Subject != "unchanged" || !slices.Equal(got.Participants, []string{uid("alice")}) {
		t.Fatalf("an ambiguous request changed the conversation: %+v %s", got, now)
	}
	if list, _ := a.page(u, "/v1/conversations"); len(list) != 1 {
		t.Fatalf("%d conversations, want 1", len(list))
	}
	if msgs, _ := a.messages(u, base+"/messages"); len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
}
