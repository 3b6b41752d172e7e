package clientstest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/pkg/problem"
)

func (g *goSuite) testConversationsFollowsLinkAcrossPages(t *testing.T) {
	f := g.newWire(t)
	seeded := f.seed(5) // c0 (oldest) .. c4
	c := f.client(t, nil)

	got := subjects(t, c.Conversations(context.Background(), client.ListOptions{Limit: 2}))
	if want := []string{"c4", "c3", "c2", "c1", "c0"}; !slices.Equal(got, want) {
		t.Fatalf("subjects = %v, want %v", got, want)
	}
	if n := f.count("GET /v1/conversations"); n != 3 {
		t.Fatalf("%d page requests, want 3", n)
	}

	// The status filter is kept from page to page (the service refuses a
	// cursor used with another filter). c0, c2 and c4 are closed, oldest
	// first, so that the listing keeps its order.
	for _, i := range []int{0, 2, 4} {
		if _, err := f.direct(t).PatchConversation(context.Background(), seeded[i], client.ConversationPatch{Status: client.StatusClosed}); err != nil {
			t.Fatal(err)
		}
	}
	got = subjects(t, c.Conversations(context.Background(), client.ListOptions{Limit: 1, Status: client.StatusClosed}))
	if want := []string{"c4", "c2", "c0"}; !slices.Equal(got, want) {
		t.Fatalf("closed subjects = %v, want %v", got, want)
	}
}

func (g *goSuite) testConversationsBehindAPathPrefix(t *testing.T) {
	f := g.newWire(t)
	f.seed(5)
	gw := httptest.NewServer(http.StripPrefix("/conversations", f.conv.Config.Handler))
	defer gw.Close()
	c, err := client.New(client.Config{
		AccountURL: f.account.URL, ConversationsURL: gw.URL + "/conversations/",
		Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := subjects(t, c.Conversations(context.Background(), client.ListOptions{Limit: 2}))
	if want := []string{"c4", "c3", "c2", "c1", "c0"}; !slices.Equal(got, want) {
		t.Fatalf("subjects = %v, want %v", got, want)
	}
}

func (g *goSuite) testConversationsStopsOnBreak(t *testing.T) {
	for _, stopAfter := range []int{1, 2} { // within and at the end of the first page
		f := g.newWire(t)
		f.seed(5)
		c := f.client(t, nil)
		n := 0
		for _, err := range c.Conversations(context.Background(), client.ListOptions{Limit: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			if n++; n == stopAfter {
				break
			}
		}
		if got := f.count("GET /v1/conversations"); got != 1 {
			t.Fatalf("break after %d: %d page requests, want 1", stopAfter, got)
		}
	}
}

func (g *goSuite) testConversationsYieldsAPageErrorOnce(t *testing.T) {
	f := g.newWire(t)
	f.seed(5)
	// A stand-in: the services answer 503 only when their database is
	// down, which the suite's shared database cannot be made to be.
	f.set(func(f *wire) {
		f.hook = func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Query().Get("cursor") == "" {
				return false
			}
			_ = problem.Write(w, problem.DatabaseUnavailable())
			return true
		}
	})
	// Retries off: the 503 comes back at once.
	c := f.newClient(t, nil, client.Config{
		Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password},
		MaxRetries:  -1,
	})
	var got []string
	var errs []error
	for conv, err := range c.Conversations(context.Background(), client.ListOptions{Limit: 2}) {
		if err != nil {
			errs = append(errs, err)
			continue // the iterator must stop by itself
		}
		got = append(got, conv.Subject)
	}
	if !slices.Equal(got, []string{"c4", "c3"}) || len(errs) != 1 {
		t.Fatalf("got %v and errors %v, want the first page and one error", got, errs)
	}
	var e *client.Error
	if !errors.As(errs[0], &e) || e.Code != client.CodeUnavailable || e.RetryAfter != problem.RetryAfterDatabase {
		t.Fatalf("error = %v", errs[0])
	}
	if n := f.count("GET /v1/conversations"); n != 2 {
		t.Fatalf("%d page requests, want 2: retries are off", n)
	}
}

func (g *goSuite) testListConversationsPage(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()

	page, err := c.ListConversationsPage(ctx, client.ListOptions{}, "")
	if err != nil || page.Conversations == nil || len(page.Conversations) != 0 || page.NextURL != "" {
		t.Fatalf("empty listing: %+v, %v", page, err)
	}

	f.seed(3)
	var got []string
	next := ""
	for i := 0; ; i++ {
		page, err := c.ListConversationsPage(ctx, client.ListOptions{Limit: 2}, next)
		if err != nil {
			t.Fatal(err)
		}
		for _, conv := range page.Conversations {
			got = append(got, conv.Subject)
		}
		if page.NextURL == "" {
			break
		}
		if !strings.HasPrefix(page.NextURL, f.conv.URL+"/v1/conversations?") {
			t.Fatalf("NextURL = %q, want an absolute URL of the service", page.NextURL)
		}
		next = page.NextURL
	}
	if !slices.Equal(got, []string{"c2", "c1", "c0"}) {
		t.Fatalf("subjects = %v", got)
	}

	// A bad limit is the service's 400, with the field.
	f.set(func(f *wire) { f.invalidRequests = true })
	_, err = c.ListConversationsPage(ctx, client.ListOptions{Limit: 101}, "")
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeValidationFailed || len(e.FieldErrors) != 1 || e.FieldErrors[0].Field != "limit" {
		t.Fatalf("limit 101: %v", err)
	}
}

// testNextLinkParsing feeds Link headers to the client and checks which
// next page it would request. A stand-in answers: the service sends one
// form of Link header, and what the client must make of the others is the
// point.
func (g *goSuite) testNextLinkParsing(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	origin := f.conv.URL
	for _, tc := range []struct {
		name  string
		links []string // Link header fields
		next  string   // want NextURL without the origin; "" for none
		err   string   // want an error containing this
	}{
		{name: "none"},
		{name: "as the service sends it",
			links: []string{`</v1/conversations?cursor=AQ-_&limit=2>; rel="next"`}, next: "/v1/conversations?cursor=AQ-_&limit=2"},
		{name: "comma and semicolon inside the target",
			links: []string{`</v1/conversations?cursor=a,b;c>; rel="next"`}, next: "/v1/conversations?cursor=a,b;c"},
		{name: "several link values, next second",
			links: []string{`</v1/conversations?cursor=p>; rel="prev", </v1/conversations?cursor=n>; rel="next"`}, next: "/v1/conversations?cursor=n"},
		{name: "several header fields",
			links: []string{`</v1/conversations?cursor=p>; rel=prev`, `</v1/conversations?cursor=n>;rel=next`}, next: "/v1/conversations?cursor=n"},
		{name: "quoted string with a comma, a semicolon and an escaped quote",
			links: []string{`</x>; title="a, b; rel=\"next\""; rel="prev", </v1/conversations?cursor=q>; rel="next"`}, next: "/v1/conversations?cursor=q"},
		{name: "relation types are a case-insensitive list",
			links: []string{`</v1/conversations?cursor=l>; REL="last NEXT"`}, next: "/v1/conversations?cursor=l"},
		{name: "only the first rel counts",
			links: []string{`</v1/conversations?cursor=1>; rel="prev"; rel="next"`}},
		{name: "no next among other relations",
			links: []string{`</v1/conversations?cursor=1>; rel="prev", </v1/conversations>; rel="first"`}},
		{name: "a link with an anchor is about another resource",
			links: []string{`</v1/conversations?cursor=x>; rel="next"; anchor="/v1/conversations/cnv_1"`}},
		{name: "a query alone is relative to the request",
			links: []string{`<?cursor=z&limit=2>; rel="next"`}, next: "/v1/conversations?cursor=z&limit=2"},
		{name: "absolute, same origin",
			links: []string{`<` + origin + `/v1/conversations?cursor=abs>; rel="next"`}, next: "/v1/conversations?cursor=abs"},
		{name: "another origin is refused",
			links: []string{`<https://evil.example/v1/conversations?cursor=x>; rel="next"`}, err: "another origin"},
		{name: "a network-path reference is another origin",
			links: []string{`<//evil.example/v1/conversations?cursor=x>; rel="next"`}, err: "another origin"},
		{name: "no angle brackets",
			links: []string{`/v1/conversations?cursor=x; rel="next"`}, err: "malformed Link header"},
		{name: "unterminated quoted string",
			links: []string{`</v1/conversations?cursor=x>; rel="next`}, err: "malformed Link header"},
		{name: "unterminated target",
			links: []string{`</v1/conversations?cursor=x; rel="next"`}, err: "malformed Link header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.set(func(f *wire) {
				f.hook = func(w http.ResponseWriter, r *http.Request) bool {
					if r.URL.Path != "/v1/conversations" {
						return false
					}
					for _, l := range tc.links {
						w.Header().Add("Link", l)
					}
					writeJSON(w, http.StatusOK, []client.Conversation{})
					return true
				}
			})
			page, err := c.ListConversationsPage(context.Background(), client.ListOptions{}, "")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one about %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if tc.next != "" {
				want = origin + tc.next
			}
			if page.NextURL != want {
				t.Fatalf("NextURL = %q, want %q", page.NextURL, want)
			}
		})
	}

	// A cursor URL handed in by the caller is held to the same rule.
	f.set(func(f *wire) { f.hook = nil })
	if _, err := c.ListConversationsPage(context.Background(), client.ListOptions{}, "https://evil.example/v1/conversations"); err == nil {
		t.Fatal("a cursor URL of another origin was requested")
	}
}

func (g *goSuite) testCreateAndGetConversation(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()
	last := time.Date(2024, 4, 30, 9, 15, 0, 123e6, time.UTC)

	created, err := c.CreateConversation(ctx, client.NewConversation{
		Subject: "Renewal", Status: client.StatusSnoozed, Participants: []string{userID("bob")}, LastMessageAt: &last,
	})
	if err != nil {
		t.Fatal(err)
	}
	if created.ID == "" || created.Subject != "Renewal" || created.Status != client.StatusSnoozed ||
		!slices.Equal(created.Participants, []string{f.userID, userID("bob")}) ||
		created.LastMessageAt == nil || !created.LastMessageAt.Equal(last) || created.CreatedAt.IsZero() {
		t.Fatalf("created = %+v", created)
	}
	got, err := c.GetConversation(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(created)
	if string(a) != string(b) {
		t.Fatalf("get = %s, want %s", a, b)
	}

	// The zero value is a valid request: {}.
	empty, err := c.CreateConversation(ctx, client.NewConversation{})
	if err != nil || empty.Status != client.StatusOpen || empty.LastMessageAt != nil {
		t.Fatalf("empty conversation: %+v, %v", empty, err)
	}

	_, err = c.GetConversation(ctx, missingConversation)
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "GET /v1/conversations/"+missingConversation+": 404 not_found") {
		t.Fatalf("missing conversation: %v", err)
	}
	if _, err := c.GetConversation(ctx, ""); err == nil {
		t.Fatal("GetConversation with an empty id sent a request")
	}
}

func (g *goSuite) testListDefinitions(t *testing.T) {
	f := g.newWireInAccount(t, "go-definitions")
	c := f.client(t, nil)
	ctx := context.Background()
	defs, err := c.ListDefinitions(ctx)
	if err != nil || defs == nil || len(defs) != 0 {
		t.Fatalf("no definitions: %#v, %v", defs, err)
	}
	// The Go client reads definitions only: one is created by a plain POST.
	created := f.createDefinition(t, c, `{"name":"Salesforce production","type":"salesforce","enabled":false,`+
		`"config":{"instanceUrl":"https://acme.my.salesforce.com","big":12345678901234567890}}`)
	defs, err = c.ListDefinitions(ctx)
	if err != nil || len(defs) != 1 {
		t.Fatalf("%v, %v", defs, err)
	}
	d := defs[0]
	if d.ID != created.ID || d.Name != "Salesforce production" || d.Type != "salesforce" || d.Enabled ||
		!d.CreatedAt.Equal(created.CreatedAt) || !d.UpdatedAt.Equal(created.UpdatedAt) || d.CreatedAt.IsZero() {
		t.Fatalf("definition = %+v, created %+v", d, created)
	}
	if string(d.Config) != `{"instanceUrl":"https://acme.my.salesforce.com","big":12345678901234567890}` {
		t.Fatalf("config = %s: want the JSON as sent", d.Config)
	}
}

func (g *goSuite) testConversationsStopsOnARepeatingNextLink(t *testing.T) {
	f := g.newWire(t)
	seeded := f.seed(1)
	// A stand-in: the service never sends a next link that repeats.
	f.set(func(f *wire) {
		f.hook = func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != "/v1/conversations" {
				return false
			}
			w.Header().Set("Link", `</v1/conversations?cursor=same>; rel="next"`)
			writeJSON(w, http.StatusOK, seeded)
			return true
		}
	})
	c := f.client(t, nil)
	items, errs := 0, 0
	for _, err := range c.Conversations(context.Background(), client.ListOptions{}) {
		if err != nil {
			errs++
		} else {
			items++
		}
	}
	if items != 2 || errs != 1 {
		t.Fatalf("%d items, %d errors: want the two pages and one error", items, errs)
	}
}
