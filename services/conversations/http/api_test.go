package http_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/testkit/openapitest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
	"github.com/acme/platform/pkg/tracing/tracingtest"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/cursor"
	conversationshttp "github.com/acme/platform/services/conversations/http"
	"github.com/acme/platform/services/conversations/mongostore"
)

// spanSecrets are the credentials the suite's requests carry: no span
// of the suite may hold one (tracingtest.Checked).
var spanSecrets tracingtest.Secrets

func TestMain(m *testing.M) {
	mongotest.Main(tracingtest.Checked(m, tracingtest.Install(), &spanSecrets))
}

const (
	issuerURL = "http://account.test"
	audience  = "acme-platform"
)

// api is a running conversations service on a fresh database, verifying
// tokens of a test issuer, with every exchange validated against the
// OpenAPI document.
type api struct {
	t      *testing.T
	srv    *httptest.Server
	doc    *openapitest.Validator
	tokens *tokentest.Fixture
	store  *mongostore.Store
	db     *mongo.Database // the store's database, for documents an older version wrote
	hub    *conversations.Hub
}

// newAPI starts the service on a fresh database; corsOrigins, when given,
// are the origins whose web pages may call it.
func newAPI(t *testing.T, corsOrigins ...string) *api {
	return newAPIWith(t, func(d *conversationshttp.Deps) { d.CORSOrigins = corsOrigins })
}

// newAPIWith starts the service with the dependencies configure sets
// beyond the defaults of newAPI. Its event streams are fed by a Hub that
// reads every 20 ms; events reach the log when the test calls relay.
func newAPIWith(t *testing.T, configure func(*conversationshttp.Deps)) *api {
	t.Helper()
	tokens := tokentest.New(t, tokentest.Options{Alg: token.AlgES256, Issuer: issuerURL, Audience: []string{audience}})
	return serve(t, tokens, openapitest.Load(t, conversationshttp.OpenAPI), configure)
}

// serve starts the service on a fresh database, trusting tokens, with
// every exchange checked by doc.
func serve(t *testing.T, tokens *tokentest.Fixture, doc *openapitest.Validator, configure func(*conversationshttp.Deps)) *api {
	t.Helper()
	db := mongotest.New(t)
	store := mongostore.New(db)
	if err := store.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	cursors, _ := cursor.New([]byte(strings.Repeat("k", 32)))
	hub := &conversations.Hub{Store: store, Interval: 20 * time.Millisecond, MaxPerCaller: conversationshttp.DefaultMaxStreamsPerCaller}
	deps := conversationshttp.Deps{Store: store, Cursors: cursors, Verifier: tokens.Verifier, Hub: hub}
	configure(&deps)
	srv := httptest.NewServer(spanSecrets.Handler(conversationshttp.NewHandler(deps)))
	t.Cleanup(srv.Close)
	t.Cleanup(hub.Close)
	return &api{t: t, srv: srv, doc: doc, tokens: tokens, store: store, db: db, hub: hub}
}

// fresh is a service like a, with a's tokens and OpenAPI coverage, on a
// database of its own until t ends: the embedded store reads a whole
// collection for every query but by id, so a test that makes many
// conversations would otherwise slow down every test after it.
func (a *api) fresh(t *testing.T) *api {
	t.Helper()
	return serve(t, a.tokens, a.doc, func(*conversationshttp.Deps) {})
}

// relay copies the events pending now into the log, as the relay of a
// replica does in the background.
func (a *api) relay() {
	a.t.Helper()
	if _, err := (&conversations.Relay{Store: a.store}).RelayOnce(context.Background()); err != nil {
		a.t.Fatal(err)
	}
}

// uid is the user id of the test user called name: the form the account
// service makes ("usr_" and 24 hex digits), derived from the name, so that
// a test names its users and the service sees real ids.
func uid(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "usr_" + hex.EncodeToString(sum[:12])
}

// user returns an id token of the user called name (user id uid(name))
// in accountID.
func (a *api) user(accountID, name string) string {
	set, err := a.tokens.Issuer.Mint(context.Background(), token.Subject{UserID: uid(name), AccountID: accountID, AccountName: accountID, Username: name})
	if err != nil {
		a.t.Fatal(err)
	}
	return set.IDToken
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) problem(t *testing.T, status int, code, field string) {
	t.Helper()
	if r.status != status || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %s %s, want %d problem", r.status, r.header.Get("Content-Type"), r.body, status)
	}
	var p struct {
		Code   string `json:"code"`
		Errors []struct {
			Field string `json:"field"`
		} `json:"errors"`
	}
	json.Unmarshal(r.body, &p)
	if p.Code != code {
		t.Fatalf("code = %q, want %q (%s)", p.Code, code, r.body)
	}
	if field != "" && !slices.ContainsFunc(p.Errors, func(e struct {
		Field string `json:"field"`
	}) bool {
		return e.Field == field
	}) {
		t.Fatalf("errors do not name %q: %s", field, r.body)
	}
}

func (a *api) send(method, path, bearer, body string, validRequest bool) response {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, a.srv.URL+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	var resp *http.Response
	var b []byte
	if validRequest {
		resp, b = a.doc.Do(a.t, a.srv.Client(), req)
	} else {
		resp, b = a.doc.DoResponseOnly(a.t, a.srv.Client(), req)
	}
	return response{resp.StatusCode, resp.Header, b}
}

type conversation struct {
	ID            string     `json:"id"`
	Subject       string     `json:"subject"`
	Status        string     `json:"status"`
	Participants  []string   `json:"participants"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	LastMessageAt *time.Time `json:"lastMessageAt"`
}

func (a *api) create(bearer, body string) conversation {
	a.t.Helper()
	r := a.send("POST", "/v1/conversations", bearer, body, true)
	if r.status != http.StatusCreated {
		a.t.Fatalf("create: %d %s", r.status, r.body)
	}
	var c conversation
	json.Unmarshal(r.body, &c)
	return c
}

var nextLink = regexp.MustCompile(`^<(/v1/conversations\?[^>]+)>; rel="next"$`)

// page lists path and returns the conversations and the next link ("" on
// the last page).
func (a *api) page(bearer, path string) ([]conversation, string) {
	a.t.Helper()
	return listed[conversation](a, path, a.send("GET", path, bearer, "", true), nextLink)
}

// listed decodes r, the answer to GET path, as a list of T and returns it
// with the link next finds in its Link header ("" when it has none).
func listed[T any](a *api, path string, r response, next *regexp.Regexp) ([]T, string) {
	a.t.Helper()
	if r.status != http.StatusOK {
		a.t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	var list []T
	if err := json.Unmarshal(r.body, &list); err != nil || list == nil {
		a.t.Fatalf("GET %s: body %s is not a JSON array", path, r.body)
	}
	link := r.header.Get("Link")
	if link == "" {
		return list, ""
	}
	m := next.FindStringSubmatch(link)
	if m == nil {
		a.t.Fatalf("Link header %q is not a next link (%s)", link, next)
	}
	return list, m[1]
}

func TestAPI(t *testing.T) {
	t.Parallel()
	// One service and one OpenAPI coverage record; each subtest on a
	// database of its own (fresh).
	a := newAPI(t)
	for _, tc := range []struct {
		name string
		test func(*testing.T, *api)
	}{
		{"EventFeed", testEventFeed},
		{"BadEventParameters", testBadEventParameters},
		{"EventStream", testEventStream},
		{"TooManyStreams", testTooManyStreams},
		{"EventsBelowThePurge", testEventsBelowThePurge},
		{"Paging", testPaging},
		{"InsertsBetweenPages", testInsertsBetweenPages},
		{"StatusFilterKeepsItsCursor", testStatusFilter},
		{"BadListParameters", testBadListParameters},
		{"Isolation", testIsolation},
		{"CreateAndGet", testCreateAndGet},
		{"CreateBadInput", testCreateBadInput},
		{"Bearer", testBearer},
		{"Messages", testMessages},
		{"MessagePagingAndCursors", testMessagePaging},
		{"BadMessageInput", testBadMessageInput},
		{"EveryRouteHidesOthersConversations", testLifecycleIsolation},
		{"Lifecycle", testLifecycle},
		{"BadPatch", testBadPatch},
		{"IfMatch", testIfMatch},
		{"ConcurrentEditorsOneWins", testConcurrentEditors},
		{"ConcurrentMessagesNeverMoveBackwards", testConcurrentMessages},
		{"Participants", testParticipants},
		{"EveryChangeMovesUpdatedAtForward", testUpdatedAtForward},
		{"UpdatedAfter", testUpdatedAfter},
		{"Idempotency", testIdempotency},
		{"ConcurrentIdempotentRequestsCreateOne", testConcurrentIdempotency},
		{"PostStoppedBetweenItsWritesIsRepaired", testCrashRepair},
		{"BearerOnNewRoutes", testBearerOnNewRoutes},
		{"ClientReadsEveryConversationOfItsAccount", testClientReadsEveryConversation},
		{"ClientPagesTheAccountWideListing", testClientPaging},
		{"ClientWrites", testClientWrites},
		{"ClientWithoutTheScopeIs403", testClientScopes},
		{"ClientIdempotencyKeysAreItsOwn", testClientIdempotency},
		{"AmbiguousCredentialsNeverAuthenticate", testAmbiguousCredentials},
		{"BoundaryValuesThroughEveryWritePath", testBoundaryValuesThroughEveryWritePath},
		{"StoredOutOfRangeTimesAreServed", testStoredOutOfRangeTimesAreServed},
		{"PathIDsAreCheckedBeforeTheStore", testPathIDs},
		{"StrictBodiesAndParameters", testStrictBodies},
		{"WebhookEndpoints", testWebhookEndpoints},
		{"WebhookScopes", testWebhookScopes},
		{"WebhookBadInput", testWebhookBadInput},
		{"WebhookURLAddresses", testWebhookURLAddresses},
		{"WebhookLimits", testWebhookLimits},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, a.fresh(t)) })
	}
	t.Run("OpenAPIServed", func(t *testing.T) {
		if r := a.send("GET", "/openapi.yaml", "", "", true); r.status != 200 || !strings.Contains(string(r.body), "openapi: 3.1") {
			t.Fatalf("openapi.yaml: %d", r.status)
		}
	})
	// 409 conflict of PATCH: a change without If-Match that loses its
	// compare-and-set 50 times in a row; no test can provoke it.
	a.doc.AssertAllOperationsCovered(t, "* * 503", "* * 413", "* * 415", "PATCH /v1/conversations/{id} 409")
}

func testPaging(t *testing.T, a *api) {
	alice := a.user("acc_paging", "alice")
	if list, next := a.page(alice, "/v1/conversations"); len(list) != 0 || next != "" {
		t.Fatalf("no conversations: %v %q", list, next)
	}
	created := map[string]bool{}
	for i := range 25 {
		created[a.create(alice, fmt.Sprintf(`{"subject":"c%d"}`, i)).ID] = true
	}
	list, next := a.page(alice, "/v1/conversations")
	if len(list) != 10 || next == "" || !strings.Contains(next, "limit=10") {
		t.Fatalf("default page: %d items, next %q; want 10 and a next link", len(list), next)
	}
	all := list
	pages := 1
	for next != "" {
		list, next = a.page(alice, next)
		all = append(all, list...)
		pages++
	}
	if pages != 3 || len(all) != 25 {
		t.Fatalf("%d pages, %d items; want 3 pages, 25 items", pages, len(all))
	}
	seen := map[string]bool{}
	for i, c := range all {
		if !created[c.ID] || seen[c.ID] {
			t.Fatalf("item %d (%s) unknown or repeated", i, c.ID)
		}
		seen[c.ID] = true
		if i > 0 {
			prev := all[i-1]
			if c.UpdatedAt.After(prev.UpdatedAt) || c.UpdatedAt.Equal(prev.UpdatedAt) && c.ID > prev.ID {
				t.Fatalf("items %d and %d out of order", i-1, i)
			}
		}
	}
	if list, _ := a.page(alice, "/v1/conversations?limit=10"); len(list) != 10 {
		t.Fatalf("limit=10 gave %d", len(list))
	}
	if list, _ := a.page(alice, "/v1/conversations?limit=100"); len(list) != 25 {
		t.Fatalf("limit=100 gave %d", len(list))
	}
}

func testInsertsBetweenPages(t *testing.T, a *api) {
	bob := a.user("acc_inserts", "bob")
	existing := map[string]bool{}
	for range 9 {
		existing[a.create(bob, `{}`).ID] = true
	}
	seen := map[string]int{}
	next := "/v1/conversations?limit=4"
	for next != "" {
		var list []conversation
		list, next = a.page(bob, next)
		for _, c := range list {
			seen[c.ID]++
		}
		a.create(bob, `{"subject":"arrived while paging"}`)
	}
	for id := range existing {
		if seen[id] != 1 {
			t.Errorf("%s seen %d times", id, seen[id])
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s seen %d times", id, n)
		}
	}
}

func testStatusFilter(t *testing.T, a *api) {
	u := a.user("acc_status", "carol")
	for _, s := range []string{"open", "closed", "closed", "snoozed", "closed"} {
		a.create(u, `{"status":"`+s+`"}`)
	}
	list, next := a.page(u, "/v1/conversations?status=closed&limit=2")
	if len(list) != 2 || !strings.Contains(next, "status=closed") {
		t.Fatalf("closed page 1: %d, next %q", len(list), next)
	}
	rest, last := a.page(u, next)
	if len(rest) != 1 || last != "" {
		t.Fatalf("closed page 2: %d, next %q", len(rest), last)
	}
	for _, c := range append(list, rest...) {
		if c.Status != "closed" {
			t.Fatalf("status filter returned %s", c.Status)
		}
	}
	// The same cursor without the filter would list something else: refused.
	unfiltered := strings.NewReplacer("&status=closed", "", "status=closed&", "").Replace(next)
	if unfiltered == next {
		t.Fatalf("next link %q has no status to remove", next)
	}
	a.send("GET", unfiltered, u, "", false).problem(t, 400, "validation_failed", "cursor")
}

func testBadListParameters(t *testing.T, a *api) {
	u := a.user("acc_bad", "dave")
	for range 3 {
		a.create(u, `{}`)
	}
	_, next := a.page(u, "/v1/conversations?limit=1")
	cur := next[strings.Index(next, "cursor=")+len("cursor="):]
	raw, _ := base64.RawURLEncoding.DecodeString(cur)
	raw[3] ^= 0x20
	altered := base64.RawURLEncoding.EncodeToString(raw)

	for _, tc := range []struct{ query, field string }{
		{"limit=0", "limit"}, {"limit=-1", "limit"}, {"limit=101", "limit"}, {"limit=abc", "limit"},
		{"limit=1.5", "limit"}, {"limit=", "limit"}, {"limit=1&limit=2", "limit"},
		{"cursor=not-a-cursor", "cursor"}, {"cursor=" + altered, "cursor"}, {"cursor=", "cursor"},
		{"status=archived", "status"}, {"status=OPEN", "status"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			a.send("GET", "/v1/conversations?"+tc.query, u, "", false).problem(t, 400, "validation_failed", tc.field)
		})
	}
	// Another user's cursor is refused too: it would reveal a position in
	// a listing that is not theirs.
	a.send("GET", next, a.user("acc_bad", "erin"), "", false).problem(t, 400, "validation_failed", "cursor")
}

func testIsolation(t *testing.T, a *api) {
	// Two accounts, two users each; the same user ids in both accounts.
	want := map[string][]string{}
	for _, acc := range []string{"acc_x", "acc_y"} {
		u1, u2 := a.user(acc, "u1"), a.user(acc, "u2")
		only1 := a.create(u1, `{"subject":"u1 alone"}`)
		both := a.create(u1, `{"subject":"both","participants":["`+uid("u2")+`"]}`)
		only2 := a.create(u2, `{"subject":"u2 alone"}`)
		want[acc+"/u1"] = []string{only1.ID, both.ID}
		want[acc+"/u2"] = []string{both.ID, only2.ID}
		if r := a.send("GET", "/v1/conversations/"+only1.ID, u2, "", true); r.status != 404 {
			t.Errorf("%s/u2 reads u1's conversation: %d", acc, r.status)
		}
	}
	for who, ids := range want {
		acc, user, _ := strings.Cut(who, "/")
		list, _ := a.page(a.user(acc, user), "/v1/conversations?limit=100")
		var got []string
		for _, c := range list {
			got = append(got, c.ID)
		}
		slices.Sort(got)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Errorf("%s sees %v, want %v", who, got, ids)
		}
	}
	// Same user id, other account: nothing.
	other := a.create(a.user("acc_x", "u1"), `{}`)
	a.send("GET", "/v1/conversations/"+other.ID, a.user("acc_y", "u1"), "", true).problem(t, 404, "not_found", "")
}

func testCreateAndGet(t *testing.T, a *api) {
	u := a.user("acc_create", "frank")
	r := a.send("POST", "/v1/conversations", u, `{"subject":"Renewal","status":"snoozed","participants":["`+uid("grace")+`","`+uid("frank")+`","`+uid("grace")+`"],"lastMessageAt":"2026-01-02T03:04:05.678Z"}`, true)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var c conversation
	json.Unmarshal(r.body, &c)
	if r.header.Get("Location") != "/v1/conversations/"+c.ID || c.Subject != "Renewal" || c.Status != "snoozed" ||
		!slices.Equal(c.Participants, []string{uid("frank"), uid("grace")}) || c.LastMessageAt == nil ||
		!c.LastMessageAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)) {
		t.Fatalf("created %+v, Location %q", c, r.header.Get("Location"))
	}
	// Defaults: open, the caller as the only participant, lastMessageAt null.
	d := a.create(u, `{}`)
	if d.Status != "open" || !slices.Equal(d.Participants, []string{uid("frank")}) || d.LastMessageAt != nil {
		t.Fatalf("defaults: %+v", d)
	}
	var got conversation
	gr := a.send("GET", "/v1/conversations/"+c.ID, a.user("acc_create", "grace"), "", true)
	json.Unmarshal(gr.body, &got)
	if gr.status != 200 || got.ID != c.ID {
		t.Fatalf("participant grace: %d %s", gr.status, gr.body)
	}
	a.send("GET", "/v1/conversations/cnv_nope", u, "", true).problem(t, 404, "not_found", "")
}

func testCreateBadInput(t *testing.T, a *api) {
	u := a.user("acc_badcreate", "heidi")
	many := make([]string, 101)
	for i := range many {
		many[i] = uid(fmt.Sprintf("u%d", i))
	}
	manyJSON, _ := json.Marshal(many)
	for _, tc := range []struct{ name, body, code, field string }{
		{"long subject", `{"subject":"` + strings.Repeat("s", 301) + `"}`, "validation_failed", "subject"},
		{"bad status", `{"status":"archived"}`, "validation_failed", "status"},
		{"participants not array", `{"participants":"u2"}`, "validation_failed", "participants"},
		{"empty participant", `{"participants":[""]}`, "validation_failed", "participants[0]"},
		{"too many participants", `{"participants":` + string(manyJSON) + `}`, "validation_failed", "participants"},
		{"subject object", `{"subject":{"$gt":""}}`, "validation_failed", "subject"},
		{"bad time", `{"lastMessageAt":"yesterday"}`, "validation_failed", "lastMessageAt"},
		{"time of year 0000 at +01:00", `{"lastMessageAt":"0000-01-01T00:00:00+01:00"}`, "validation_failed", "lastMessageAt"},
		{"time of year 9999 at -01:00", `{"lastMessageAt":"9999-12-31T23:59:59-01:00"}`, "validation_failed", "lastMessageAt"},
		{"empty status", `{"status":""}`, "validation_failed", "status"},
		{"participant of another form", `{"participants":["bob"]}`, "validation_failed", "participants[0]"},
		{"malformed", `{`, "malformed_json", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.send("POST", "/v1/conversations", u, tc.body, false).problem(t, 400, tc.code, tc.field)
		})
	}
	if list, _ := a.page(u, "/v1/conversations"); len(list) != 0 {
		t.Fatalf("bad inputs created %d conversations", len(list))
	}
}

func testBearer(t *testing.T, a *api) {
	set, _ := a.tokens.Issuer.Mint(context.Background(), token.Subject{UserID: "ivan", AccountID: "acc_b"})
	if list, _ := a.page(set.AccessToken, "/v1/conversations"); list == nil {
		t.Fatal("access token refused")
	}
	forged := a.tokens.Stranger(t, token.Subject{UserID: "ivan", AccountID: "acc_b"})
	for name, bearer := range map[string]string{"refresh token": set.RefreshToken, "unknown key": forged.IDToken, "none": ""} {
		for _, rq := range [][3]string{{"GET", "/v1/conversations", ""}, {"POST", "/v1/conversations", "{}"}, {"GET", "/v1/conversations/cnv_x", ""}} {
			r := a.send(rq[0], rq[1], bearer, rq[2], false)
			r.problem(t, 401, "invalid_token", "")
			if r.header.Get("WWW-Authenticate") != `Bearer error="invalid_token"` {
				t.Errorf("%s %s %s: WWW-Authenticate %q", name, rq[0], rq[1], r.header.Get("WWW-Authenticate"))
			}
		}
	}
}
