package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/validation"
)

// The tests of this file drive what one caller may send into what every
// later read serves: times, ids, bodies, nesting.

// boundaryTimes are RFC 3339 date-times around every edge the service
// knows: the ends of RFC 3339 in UTC (years 0001 and 9999, reached from
// year 0000 or 10000 by an offset), 1970 (the earliest lastMessageAt), now
// and a day after, sub-millisecond digits, and text that is no date-time.
func boundaryTimes(now time.Time) []string {
	rfc := func(t time.Time) string { return t.Format(time.RFC3339Nano) }
	return []string{
		"0000-01-01T00:00:00Z", "0000-01-01T00:00:00+01:00", "0000-12-31T23:59:59-01:00",
		"0001-01-01T00:00:00Z", "0001-01-01T00:59:59.999+01:00", "0001-01-01T00:00:00.0001Z",
		"1969-12-31T23:59:59.999Z", "1970-01-01T00:00:00Z", "1970-01-01T00:59:59.999+01:00", "1970-01-01T01:00:00+01:00",
		"2024-02-29T12:00:00.123456789-14:00", "2024-05-01T12:00:00.5+23:59",
		rfc(now), rfc(now.Add(23 * time.Hour)), rfc(now.Add(25 * time.Hour)),
		"9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.9999999Z", "9999-12-31T23:59:59-01:00", "9999-12-31T22:59:59-01:00",
		"2024-13-01T00:00:00Z", "2024-05-01 12:00:00Z", "2024-05-01T12:00:00", "-0001-01-01T00:00:00Z", "",
	}
}

// inRange parses s as the service's contract says it does (RFC 3339, then
// UTC at millisecond precision) and reports whether it lies in
// [earliest, latest].
func inRange(s string, earliest, latest time.Time) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false
	}
	t = t.UTC().Truncate(time.Millisecond)
	return t, !t.Before(earliest) && !t.After(latest)
}

var (
	rfc3339First = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	rfc3339Last  = time.Date(9999, 12, 31, 23, 59, 59, int(999*time.Millisecond), time.UTC)
	epoch        = time.Unix(0, 0).UTC()
)

// walk follows a listing from path through every next link to the end as
// bearer: every page must be a 200 JSON array (never a 5xx, never a link
// the service then refuses). It returns how many items it saw.
func (a *api) walk(t *testing.T, bearer, path string) int {
	t.Helper()
	n := 0
	for pages := 0; path != ""; pages++ {
		if pages > 1000 {
			t.Fatalf("listing does not end: %s", path)
		}
		r := a.do(exchange{method: "GET", path: path, bearer: bearer})
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(r.body, &items); err != nil || items == nil {
			t.Fatalf("GET %s: %s is not a JSON array", path, r.body)
		}
		n += len(items)
		next := ""
		if link := r.header.Get("Link"); link != "" {
			m := nextLink.FindStringSubmatch(link)
			if m == nil {
				m = nextMessagesLink.FindStringSubmatch(link)
			}
			if m == nil {
				t.Fatalf("GET %s: Link %q is not a next link", path, link)
			}
			next = m[1]
		}
		path = next
	}
	return n
}

// testBoundaryValuesThroughEveryWritePath sends boundary values through
// every write of the API (create as a user and as a service client, with
// lastMessageAt; PATCH; participants; messages with metadata at and over
// the nesting limit) and then reads every listing (the users', with and
// without status, with updatedAfter at every boundary; the service
// client's; each conversation's messages) and follows every Link to the
// end: nothing is a 5xx, every refusal is a 400 naming the field, and
// every link the service hands out it accepts.
func testBoundaryValuesThroughEveryWritePath(t *testing.T, a *api) {
	const acc = "acc_boundaries"
	u, peer := a.user(acc, "olga"), a.user(acc, "pavel")
	reader := a.client(acc, "cli_reader", token.ScopeConversationsRead)
	writer := a.client(acc, "cli_writer", token.ScopeConversationsWrite, token.ScopeConversationsRead)
	now := time.Now().UTC()
	earliest, latest := epoch, now.Add(24*time.Hour)

	var created []string
	for i, v := range boundaryTimes(now) {
		for _, who := range []struct {
			bearer, participants string
		}{{u, `[]`}, {writer, `["` + uid("olga") + `","` + uid("pavel") + `"]`}} {
			value, _ := json.Marshal(v)
			body := fmt.Sprintf(`{"subject":"t%d","participants":%s,"lastMessageAt":%s}`, i, who.participants, value)
			// No value is within an hour of the latest end, so the
			// service's clock, a little later than the test's, agrees.
			want, ok := inRange(v, earliest, latest)
			r := a.do(exchange{method: "POST", path: "/v1/conversations", bearer: who.bearer, body: body, invalid: !ok})
			if !ok {
				r.problem(t, 400, "validation_failed", "lastMessageAt")
				continue
			}
			if r.status != 201 {
				t.Fatalf("lastMessageAt %q: %d %s", v, r.status, r.body)
			}
			var c conversation
			json.Unmarshal(r.body, &c)
			if c.LastMessageAt == nil || !c.LastMessageAt.Equal(want) || c.LastMessageAt.Location() != time.UTC {
				t.Fatalf("lastMessageAt %q stored as %v, want %v", v, c.LastMessageAt, want)
			}
			created = append(created, c.ID)
		}
	}
	for _, v := range []string{`5`, `true`, `{}`, `["2024-05-01T12:00:00Z"]`} {
		a.do(exchange{method: "POST", path: "/v1/conversations", bearer: u, body: `{"lastMessageAt":` + v + `}`, invalid: true}).
			problem(t, 400, "validation_failed", "lastMessageAt")
	}
	if len(created) < 6 {
		t.Fatalf("only %d conversations created", len(created))
	}

	// The other writes, each with its edge values, on the conversations
	// made above.
	deep := func(depth int) string {
		return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
	}
	for i, id := range created {
		base := "/v1/conversations/" + id
		for _, edit := range []struct {
			x      exchange
			status int
			field  string
		}{
			{exchange{method: "PATCH", path: base, body: `{"status":"snoozed","subject":"` + strings.Repeat("é", 300) + `"}`, contentType: "application/merge-patch+json"}, 200, ""},
			{exchange{method: "PATCH", path: base, body: `{"status":""}`, contentType: "application/merge-patch+json"}, 400, "status"},
			{exchange{method: "PATCH", path: base, body: `{"subject":"` + strings.Repeat("é", 301) + `"}`, contentType: "application/merge-patch+json"}, 400, "subject"},
			{exchange{method: "PUT", path: base + "/participants/" + uid(fmt.Sprint("guest", i))}, 204, ""},
			{exchange{method: "PUT", path: base + "/participants/%FF%FE"}, 400, "userId"},
			{exchange{method: "DELETE", path: base + "/participants/a%00b"}, 400, "userId"},
			{exchange{method: "POST", path: base + "/messages", body: `{"body":"` + strings.Repeat("x", 10000) + `","metadata":` + deep(validation.MaxJSONDepth) + `}`}, 201, ""},
			{exchange{method: "POST", path: base + "/messages", body: `{"body":"x","metadata":` + deep(validation.MaxJSONDepth+1) + `}`}, 400, "metadata"},
			{exchange{method: "POST", path: base + "/messages", body: `{"body":"x","metadata":{"k":[[[` + strings.Repeat(`"[{",`, 50) + `"x"]]]}}`}, 201, ""},
		} {
			if edit.status >= 400 && i > 1 {
				// A refusal depends on the value, not on the
				// conversation: two of them show it.
				continue
			}
			x := edit.x
			x.bearer, x.invalid = u, edit.status >= 400
			r := a.do(x)
			if edit.status >= 400 {
				r.problem(t, edit.status, "validation_failed", edit.field)
			} else if r.status != edit.status {
				t.Fatalf("%s %s: %d %s, want %d", x.method, x.path, r.status, r.body, edit.status)
			}
		}
	}

	// Every listing, followed to its end.
	for _, bearer := range []string{u, peer, reader} {
		a.walk(t, bearer, "/v1/conversations?limit=1")
		for _, status := range []string{"open", "snoozed", "closed"} {
			a.walk(t, bearer, "/v1/conversations?limit=3&status="+status)
		}
		if n := a.walk(t, bearer, "/v1/conversations?limit=2"); bearer != peer && n < len(created) {
			t.Fatalf("listing shows %d conversations, want at least %d", n, len(created))
		}
		for _, v := range boundaryTimes(now) {
			// Pages of 12: the bound is carried into a next link or two,
			// each followed; limit=1 above binds every stored time.
			path := "/v1/conversations?limit=12&updatedAfter=" + url.QueryEscape(v)
			if _, ok := inRange(v, rfc3339First, rfc3339Last); !ok {
				a.do(exchange{method: "GET", path: path, bearer: bearer, invalid: true}).problem(t, 400, "validation_failed", "updatedAfter")
				continue
			}
			a.walk(t, bearer, path)
			a.walk(t, bearer, path+"&status=snoozed")
		}
	}
	for _, id := range created {
		for bearer, limit := range map[string]int{u: 1, reader: 2} {
			if n := a.walk(t, bearer, fmt.Sprintf("/v1/conversations/%s/messages?limit=%d", id, limit)); n != 2 {
				t.Fatalf("conversation %s lists %d messages, want 2", id, n)
			}
		}
	}
	// The repro of the issue: the next link of a first page is accepted.
	a.do(exchange{method: "GET", path: "/v1/conversations?limit=1&updatedAfter=0000-01-01T00:00:00%2B01:00", bearer: u, invalid: true}).
		problem(t, 400, "validation_failed", "updatedAfter")
	if n := a.walk(t, u, "/v1/conversations?limit=1&updatedAfter=0001-01-01T00:00:00%2B00:00"); n < len(created) {
		t.Fatalf("updatedAfter=0001-01-01 lists %d, want every one", n)
	}
}

// testStoredOutOfRangeTimesAreServed: versions before times were checked
// stored any lastMessageAt (year -1 or 10000 in UTC among them), which
// the JSON encoder refuses. Such documents are tolerated: every read and
// change serves them, clamped to what RFC 3339 holds, never a 500.
func testStoredOutOfRangeTimesAreServed(t *testing.T, a *api) {
	const acc = "acc_legacy_times"
	u := a.user(acc, "quinn")
	reader := a.client(acc, "cli_reader", token.ScopeConversationsRead)
	stored := map[string]time.Time{ // what the old version stored for 0000-01-01T00:00:00+01:00 and 9999-12-31T23:59:59-01:00
		a.create(u, `{"subject":"too early"}`).ID: time.Date(-1, 12, 31, 23, 0, 0, 0, time.UTC),
		a.create(u, `{"subject":"too late"}`).ID:  time.Date(10000, 1, 1, 0, 59, 59, 0, time.UTC),
	}
	served := map[string]time.Time{}
	for id, at := range stored {
		if _, err := a.db.Collection("conversations").UpdateOne(context.Background(), bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "last_message_at", Value: at}}}}); err != nil {
			t.Fatal(err)
		}
		served[id] = rfc3339First
		if at.Year() > 9999 {
			served[id] = rfc3339Last
		}
	}
	check := func(c conversation) {
		t.Helper()
		if want, ok := served[c.ID]; ok && (c.LastMessageAt == nil || !c.LastMessageAt.Equal(want)) {
			t.Fatalf("conversation %s served lastMessageAt %v, want %v", c.ID, c.LastMessageAt, want)
		}
	}
	for _, bearer := range []string{u, reader} {
		list, _ := a.page(bearer, "/v1/conversations?limit=100")
		for _, c := range list {
			check(c)
		}
		a.walk(t, bearer, "/v1/conversations?limit=1&status=open")
	}
	for id := range stored {
		c, _ := a.get(u, id)
		check(c)
		if r := a.patch(u, id, `{"subject":"renamed"}`, nil); r.status != 200 {
			t.Fatalf("patch: %d %s", r.status, r.body)
		}
		a.post(u, id, `{"body":"still works"}`)
		if r := a.do(exchange{method: "PUT", path: "/v1/conversations/" + id + "/participants/" + uid("rita"), bearer: u}); r.status != 204 {
			t.Fatalf("add participant: %d %s", r.status, r.body)
		}
		a.walk(t, u, "/v1/conversations/"+id+"/messages?limit=1")
	}
	a.walk(t, u, "/v1/conversations?limit=1")
}

// testPathIDs: ids in paths are checked against their form before the
// store: a conversation or message id of another form is a 404 like an
// unknown one, a user id of another form a 400 naming userId, and none is
// ever stored.
func testPathIDs(t *testing.T, a *api) {
	const acc = "acc_pathids"
	u := a.user(acc, "sara")
	conv := a.create(u, `{"subject":"ids"}`)
	m := a.post(u, conv.ID, `{"body":"hi"}`)
	_, tag := a.get(u, conv.ID)
	base := "/v1/conversations/" + conv.ID
	for _, bad := range []string{"%FF%FE", "a%00b", "%24ne", "$ne", "usr_", "USR_" + strings.Repeat("A", 24), "usr_" + strings.Repeat("0", 23),
		"usr_" + strings.Repeat("0", 25), "usr_" + strings.Repeat("g", 24), "cli_" + strings.Repeat("0", 24), "%20" + uid("x"), uid("x") + "%0A"} {
		for _, method := range []string{"PUT", "DELETE"} {
			a.do(exchange{method: method, path: base + "/participants/" + bad, bearer: u, invalid: true}).problem(t, 400, "validation_failed", "userId")
		}
	}
	for _, bad := range []string{"%FF%FE", "a%00b", "%24ne", "cnv_nope", "CNV_" + strings.Repeat("0", 24), "msg_" + strings.Repeat("0", 24), strings.TrimPrefix(conv.ID, "cnv_")} {
		p := "/v1/conversations/" + bad
		a.do(exchange{method: "GET", path: p, bearer: u, invalid: true}).problem(t, 404, "not_found", "")
		a.do(exchange{method: "PATCH", path: p, bearer: u, body: `{"subject":"x"}`, contentType: "application/merge-patch+json", invalid: true}).problem(t, 404, "not_found", "")
		a.do(exchange{method: "PUT", path: p + "/participants/" + uid("x"), bearer: u, invalid: true}).problem(t, 404, "not_found", "")
		a.do(exchange{method: "POST", path: p + "/messages", bearer: u, body: `{"body":"x"}`, invalid: true}).problem(t, 404, "not_found", "")
		a.do(exchange{method: "GET", path: p + "/messages", bearer: u, invalid: true}).problem(t, 404, "not_found", "")
		a.do(exchange{method: "GET", path: p + "/messages/" + m.ID, bearer: u, invalid: true}).problem(t, 404, "not_found", "")
	}
	for _, bad := range []string{"%FF%FE", "a%00b", "%24ne", "msg_nope", conv.ID, strings.ToUpper(m.ID)} {
		a.do(exchange{method: "GET", path: base + "/messages/" + bad, bearer: u, invalid: true}).problem(t, 404, "not_found", "")
	}
	got, now := a.get(u, conv.ID)
	if now != tag || len(got.Participants) != 1 || got.Participants[0] != uid("sara") {
		t.Fatalf("refused ids changed the conversation: %+v (ETag %s, was %s)", got, now, tag)
	}
	if msgs, _ := a.messages(u, base+"/messages"); len(msgs) != 1 {
		t.Fatalf("refused ids posted messages: %d listed", len(msgs))
	}
	// Participants named in a body take the same form.
	for _, bad := range []string{"bob", "a\u0000b", "\uFFFD\uFFFD", "$ne", "usr_" + strings.Repeat("0", 23)} {
		body, _ := json.Marshal(map[string]any{"participants": []string{uid("ok"), bad}})
		a.do(exchange{method: "POST", path: "/v1/conversations", bearer: u, body: string(body), invalid: true}).
			problem(t, 400, "validation_failed", "participants[1]")
	}
}

// testStrictBodies: null and every other non-object body is a 400 where
// an object is expected; an empty status is a 400, in a body or a query.
func testStrictBodies(t *testing.T, a *api) {
	const acc = "acc_strict"
	u := a.user(acc, "tess")
	conv := a.create(u, `{"subject":"strict"}`)
	before, tag := a.get(u, conv.ID)
	for _, body := range []string{`null`, ` null `, `"x"`, `7`, `true`, `[]`, `[{}]`} {
		a.do(exchange{method: "POST", path: "/v1/conversations", bearer: u, body: body, invalid: true}).problem(t, 400, "malformed_json", "")
		a.do(exchange{method: "POST", path: "/v1/conversations/" + conv.ID + "/messages", bearer: u, body: body, invalid: true}).problem(t, 400, "malformed_json", "")
		a.do(exchange{method: "PATCH", path: "/v1/conversations/" + conv.ID, bearer: u, body: body, contentType: "application/merge-patch+json", invalid: true}).
			problem(t, 400, "malformed_json", "")
	}
	a.do(exchange{method: "POST", path: "/v1/conversations", bearer: u, body: `{"status":""}`, invalid: true}).problem(t, 400, "validation_failed", "status")
	a.do(exchange{method: "PATCH", path: "/v1/conversations/" + conv.ID, bearer: u, body: `{"status":""}`, contentType: "application/merge-patch+json", invalid: true}).
		problem(t, 400, "validation_failed", "status")
	for _, q := range []string{"status=", "status=&limit=1", "updatedAfter=", "limit="} {
		field := strings.SplitN(q, "=", 2)[0]
		a.do(exchange{method: "GET", path: "/v1/conversations?" + q, bearer: u, invalid: true}).problem(t, 400, "validation_failed", field)
	}
	if list, _ := a.page(u, "/v1/conversations?limit=100"); len(list) != 1 {
		t.Fatalf("refused bodies created conversations: %d listed", len(list))
	}
	if after, now := a.get(u, conv.ID); now != tag || after.Status != before.Status {
		t.Fatalf("refused bodies changed the conversation: %+v", after)
	}
	if msgs, _ := a.messages(u, "/v1/conversations/"+conv.ID+"/messages"); len(msgs) != 0 {
		t.Fatalf("refused bodies posted %d messages", len(msgs))
	}
}
