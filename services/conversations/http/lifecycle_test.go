package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/conversations"
)

// exchange is one request of the lifecycle tests: any method, body media
// type and headers; invalid marks a deliberately invalid request (only the
// response is validated against the document).
type exchange struct {
	method, path, bearer, body string
	contentType                string // application/json when a body is given and this is empty
	header                     map[string]string
	invalid                    bool
}

func (a *api) do(x exchange) response {
	a.t.Helper()
	var rd io.Reader
	if x.body != "" {
		rd = strings.NewReader(x.body)
	}
	req, _ := http.NewRequest(x.method, a.srv.URL+x.path, rd)
	switch {
	case x.contentType != "":
		req.Header.Set("Content-Type", x.contentType)
	case x.body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	if x.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+x.bearer)
	}
	for k, v := range x.header {
		req.Header.Set(k, v)
	}
	var resp *http.Response
	var b []byte
	if x.invalid {
		resp, b = a.doc.DoResponseOnly(a.t, a.srv.Client(), req)
	} else {
		resp, b = a.doc.Do(a.t, a.srv.Client(), req)
	}
	return response{resp.StatusCode, resp.Header, b}
}

type message struct {
	ID             string          `json:"id"`
	ConversationID string          `json:"conversationId"`
	Author         string          `json:"author"`
	Body           string          `json:"body"`
	Metadata       json.RawMessage `json:"metadata"`
	CreatedAt      time.Time       `json:"createdAt"`
}

func (a *api) post(bearer, convID, body string) message {
	a.t.Helper()
	r := a.do(exchange{method: "POST", path: "/v1/conversations/" + convID + "/messages", bearer: bearer, body: body})
	if r.status != http.StatusCreated {
		a.t.Fatalf("post message: %d %s", r.status, r.body)
	}
	var m message
	json.Unmarshal(r.body, &m)
	return m
}

// get returns the conversation and its ETag.
func (a *api) get(bearer, id string) (conversation, string) {
	a.t.Helper()
	r := a.do(exchange{method: "GET", path: "/v1/conversations/" + id, bearer: bearer})
	if r.status != http.StatusOK {
		a.t.Fatalf("get %s: %d %s", id, r.status, r.body)
	}
	var c conversation
	json.Unmarshal(r.body, &c)
	tag := r.header.Get("ETag")
	if !regexp.MustCompile(`^"[0-9]+"$`).MatchString(tag) {
		a.t.Fatalf("get %s: ETag %q", id, tag)
	}
	return c, tag
}

func (a *api) patch(bearer, id, body string, header map[string]string) response {
	a.t.Helper()
	return a.do(exchange{method: "PATCH", path: "/v1/conversations/" + id, bearer: bearer, body: body,
		contentType: "application/merge-patch+json", header: header})
}

var nextMessagesLink = regexp.MustCompile(`^<(/v1/conversations/[^/]+/messages\?[^>]+)>; rel="next"$`)

// messages lists path and returns the messages and the next link.
func (a *api) messages(bearer, path string) ([]message, string) {
	a.t.Helper()
	return listed[message](a, path, a.do(exchange{method: "GET", path: path, bearer: bearer}), nextMessagesLink)
}

func ids(list []conversation) []string {
	out := make([]string, len(list))
	for i, c := range list {
		out[i] = c.ID
	}
	return out
}

func testMessages(t *testing.T, a *api) {
	alice, bob := a.user("acc_msg", "alice"), a.user("acc_msg", "bob")
	conv := a.create(alice, `{"subject":"with bob","participants":["`+uid("bob")+`"]}`)
	other := a.create(bob, `{"subject":"newer, bob only"}`)
	if list, _ := a.page(bob, "/v1/conversations"); list[0].ID != other.ID {
		t.Fatalf("before the message bob's list starts with %s", list[0].ID)
	}

	r := a.do(exchange{method: "POST", path: "/v1/conversations/" + conv.ID + "/messages", bearer: alice,
		body: `{"body":"Hello Bob","metadata":{"channel":"email","n":12345678901234567890,"$k":{"a.b":[1,2]}}}`})
	if r.status != http.StatusCreated {
		t.Fatalf("post: %d %s", r.status, r.body)
	}
	var m message
	json.Unmarshal(r.body, &m)
	if r.header.Get("Location") != "/v1/conversations/"+conv.ID+"/messages/"+m.ID || !strings.HasPrefix(m.ID, "msg_") ||
		m.ConversationID != conv.ID || m.Author != uid("alice") || m.Body != "Hello Bob" ||
		string(m.Metadata) != `{"channel":"email","n":12345678901234567890,"$k":{"a.b":[1,2]}}` ||
		!m.CreatedAt.Equal(m.CreatedAt.Truncate(time.Millisecond)) || m.CreatedAt.Before(conv.UpdatedAt) {
		t.Fatalf("posted %+v, Location %q", m, r.header.Get("Location"))
	}
	// The conversation records it and rises to the top of bob's list.
	got, _ := a.get(bob, conv.ID)
	if got.LastMessageAt == nil || !got.LastMessageAt.Equal(m.CreatedAt) || !got.UpdatedAt.Equal(m.CreatedAt) {
		t.Fatalf("after the post: %+v, message at %v", got, m.CreatedAt)
	}
	if list, _ := a.page(bob, "/v1/conversations"); list[0].ID != conv.ID {
		t.Fatalf("after the message bob's list starts with %s, want %s", list[0].ID, conv.ID)
	}
	// Metadata defaults to {}; the participant bob may read and post too.
	m2 := a.post(bob, conv.ID, `{"body":"Hi"}`)
	if string(m2.Metadata) != `{}` || m2.Author != uid("bob") || !m2.CreatedAt.After(m.CreatedAt) {
		t.Fatalf("second message %+v", m2)
	}
	if r := a.post(alice, conv.ID, `{"body":"null metadata","metadata":null}`); string(r.Metadata) != `{}` {
		t.Fatalf("metadata null stored as %s", r.Metadata)
	}

	var one message
	gr := a.do(exchange{method: "GET", path: "/v1/conversations/" + conv.ID + "/messages/" + m.ID, bearer: bob})
	json.Unmarshal(gr.body, &one)
	if gr.status != 200 || one.ID != m.ID || string(one.Metadata) != string(m.Metadata) || !one.CreatedAt.Equal(m.CreatedAt) {
		t.Fatalf("get message: %d %s", gr.status, gr.body)
	}
	// A message id under another conversation, or an unknown one: 404.
	a.do(exchange{method: "GET", path: "/v1/conversations/" + other.ID + "/messages/" + m.ID, bearer: bob}).problem(t, 404, "not_found", "")
	a.do(exchange{method: "GET", path: "/v1/conversations/" + conv.ID + "/messages/msg_nope", bearer: bob}).problem(t, 404, "not_found", "")
	list, next := a.messages(alice, "/v1/conversations/"+conv.ID+"/messages")
	if len(list) != 3 || next != "" || list[0].Body != "null metadata" || list[2].ID != m.ID {
		t.Fatalf("list: %+v, next %q", list, next)
	}
	if empty, _ := a.messages(bob, "/v1/conversations/"+other.ID+"/messages"); len(empty) != 0 {
		t.Fatalf("conversation without messages lists %d", len(empty))
	}
}

func testMessagePaging(t *testing.T, a *api) {
	u := a.user("acc_msgpage", "carol")
	conv := a.create(u, `{}`)
	other := a.create(u, `{}`)
	posted := map[string]bool{}
	for i := range 25 {
		posted[a.post(u, conv.ID, fmt.Sprintf(`{"body":"m%d"}`, i)).ID] = true
	}
	list, next := a.messages(u, "/v1/conversations/"+conv.ID+"/messages")
	if len(list) != 10 || !strings.Contains(next, "limit=10") {
		t.Fatalf("default page: %d, next %q", len(list), next)
	}
	all, pages := list, 1
	for next != "" {
		// A message posted while paging is newer than the cursor: it
		// shows on no later page.
		a.post(u, conv.ID, `{"body":"while paging"}`)
		list, next = a.messages(u, next)
		all = append(all, list...)
		pages++
	}
	if pages != 3 || len(all) != 25 {
		t.Fatalf("%d pages, %d messages; want 3, 25", pages, len(all))
	}
	for i, m := range all {
		if !posted[m.ID] {
			t.Fatalf("message %d (%s %q) was not posted before paging, or repeats", i, m.ID, m.Body)
		}
		delete(posted, m.ID)
		if i > 0 && (m.CreatedAt.After(all[i-1].CreatedAt) || m.CreatedAt.Equal(all[i-1].CreatedAt) && m.ID > all[i-1].ID) {
			t.Fatalf("messages %d and %d out of order", i-1, i)
		}
	}
	_, next = a.messages(u, "/v1/conversations/"+conv.ID+"/messages?limit=3")
	cur := next[strings.Index(next, "cursor="):]
	for _, tc := range []struct{ name, path, bearer, field string }{
		{"cursor of another conversation", "/v1/conversations/" + other.ID + "/messages?" + cur, u, "cursor"},
		{"cursor of another participant", next, "", "cursor"},
		{"conversation cursor", "/v1/conversations/" + conv.ID + "/messages?" + conversationCursor(t, a, u), u, "cursor"},
		{"limit 0", "/v1/conversations/" + conv.ID + "/messages?limit=0", u, "limit"},
		{"limit 101", "/v1/conversations/" + conv.ID + "/messages?limit=101", u, "limit"},
		{"bad cursor", "/v1/conversations/" + conv.ID + "/messages?cursor=x", u, "cursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bearer := tc.bearer
			if bearer == "" {
				// Another participant of the same conversation.
				dave := a.user("acc_msgpage", "dave")
				a.do(exchange{method: "PUT", path: "/v1/conversations/" + conv.ID + "/participants/" + uid("dave"), bearer: u})
				bearer = dave
			}
			a.do(exchange{method: "GET", path: tc.path, bearer: bearer, invalid: true}).problem(t, 400, "validation_failed", tc.field)
		})
	}
}

// conversationCursor returns "cursor=..." of a conversation listing of u.
func conversationCursor(t *testing.T, a *api, u string) string {
	t.Helper()
	_, next := a.page(u, "/v1/conversations?limit=1")
	if next == "" {
		t.Fatal("no second page of conversations")
	}
	return next[strings.Index(next, "cursor="):]
}

func testBadMessageInput(t *testing.T, a *api) {
	u := a.user("acc_badmsg", "erin")
	conv := a.create(u, `{}`)
	_, tag := a.get(u, conv.ID)
	path := "/v1/conversations/" + conv.ID + "/messages"
	big := `{"k":"` + strings.Repeat("x", conversations.MaxMetadataLen) + `"}`
	for _, tc := range []struct{ name, body, code, field string }{
		{"no body member", `{}`, "validation_failed", "body"},
		{"empty body", `{"body":""}`, "validation_failed", "body"},
		{"body too long", `{"body":"` + strings.Repeat("é", 10001) + `"}`, "validation_failed", "body"},
		{"body a number", `{"body":5}`, "validation_failed", "body"},
		{"body an object", `{"body":{"$ne":null}}`, "validation_failed", "body"},
		{"metadata an array", `{"body":"x","metadata":[1]}`, "validation_failed", "metadata"},
		{"metadata a string", `{"body":"x","metadata":"{}"}`, "validation_failed", "metadata"},
		{"metadata a number", `{"body":"x","metadata":7}`, "validation_failed", "metadata"},
		{"metadata over 16 KiB", `{"body":"x","metadata":` + big + `}`, "validation_failed", "metadata"},
		{"malformed", `{"body":`, "malformed_json", ""},
		{"not an object", `["body"]`, "malformed_json", ""},
		{"two values", `{"body":"x"}{"body":"y"}`, "malformed_json", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.do(exchange{method: "POST", path: path, bearer: u, body: tc.body, invalid: true}).problem(t, 400, tc.code, tc.field)
		})
	}
	a.do(exchange{method: "POST", path: path, bearer: u, invalid: true, contentType: "application/json"}).problem(t, 400, "malformed_json", "")
	a.do(exchange{method: "POST", path: path, bearer: u, body: `{"body":"x"}`, contentType: "text/plain", invalid: true}).problem(t, 415, "unsupported_media_type", "")
	a.do(exchange{method: "POST", path: path, bearer: u, body: `{"body":"` + strings.Repeat("x", 64<<10) + `"}`, invalid: true}).problem(t, 413, "body_too_large", "")
	// Exactly 10000 characters and 16 KiB of metadata are fine.
	exact := `{"k":"` + strings.Repeat("x", conversations.MaxMetadataLen-8) + `"}`
	a.post(u, conv.ID, `{"body":"`+strings.Repeat("é", 10000)+`","metadata":`+exact+`}`)
	if list, _ := a.messages(u, path); len(list) != 1 {
		t.Fatalf("bad inputs created messages: %d listed", len(list))
	}
	if _, now := a.get(u, conv.ID); now == tag {
		t.Fatal("the one good message did not change the ETag")
	}
}

func testLifecycleIsolation(t *testing.T, a *api) {
	owner := a.user("acc_iso", "owner")
	conv := a.create(owner, `{"subject":"private"}`)
	m := a.post(owner, conv.ID, `{"body":"secret"}`)
	_, tag := a.get(owner, conv.ID)
	base := "/v1/conversations/" + conv.ID
	for _, bearer := range []string{
		a.user("acc_iso", "stranger"), // a non-participant
		a.user("acc_other", "owner"),  // the same user id in another account
	} {
		for _, x := range []exchange{
			{method: "GET", path: base},
			{method: "PATCH", path: base, body: `{"status":"closed"}`, contentType: "application/merge-patch+json"},
			{method: "PUT", path: base + "/participants/" + uid("stranger")},
			{method: "DELETE", path: base + "/participants/" + uid("owner")},
			{method: "POST", path: base + "/messages", body: `{"body":"let me in"}`},
			{method: "GET", path: base + "/messages"},
			{method: "GET", path: base + "/messages/" + m.ID},
		} {
			x.bearer = bearer
			a.do(x).problem(t, 404, "not_found", "")
		}
	}
	after, now := a.get(owner, conv.ID)
	if now != tag || after.Status != "open" || !slices.Equal(after.Participants, []string{uid("owner")}) {
		t.Fatalf("outsiders changed the conversation: %+v %s", after, now)
	}
	if list, _ := a.messages(owner, base+"/messages"); len(list) != 1 {
		t.Fatalf("outsiders posted: %d messages", len(list))
	}
	// Unknown conversation ids are the same 404.
	a.do(exchange{method: "GET", path: "/v1/conversations/cnv_nope/messages", bearer: owner}).problem(t, 404, "not_found", "")
	a.patch(owner, "cnv_nope", `{"subject":"x"}`, nil).problem(t, 404, "not_found", "")
}

func testLifecycle(t *testing.T, a *api) {
	u := a.user("acc_life", "frank")
	conv := a.create(u, `{"subject":"Renewal"}`)
	c0, tag0 := a.get(u, conv.ID)

	r := a.patch(u, conv.ID, `{"subject":"Renewal 2027","status":"snoozed"}`, nil)
	var c1 conversation
	json.Unmarshal(r.body, &c1)
	if r.status != 200 || c1.Subject != "Renewal 2027" || c1.Status != "snoozed" || !c1.UpdatedAt.After(c0.UpdatedAt) ||
		r.header.Get("ETag") == tag0 || r.header.Get("ETag") == "" || !c1.CreatedAt.Equal(c0.CreatedAt) {
		t.Fatalf("patch: %d %s ETag %s", r.status, r.body, r.header.Get("ETag"))
	}
	if got, tag := a.get(u, conv.ID); got.Subject != c1.Subject || tag != r.header.Get("ETag") {
		t.Fatalf("get after patch: %+v %s", got, tag)
	}
	// A patch that changes nothing writes nothing: same ETag, same updatedAt.
	same := a.patch(u, conv.ID, `{"status":"snoozed"}`, nil)
	var c2 conversation
	json.Unmarshal(same.body, &c2)
	if same.status != 200 || same.header.Get("ETag") != r.header.Get("ETag") || !c2.UpdatedAt.Equal(c1.UpdatedAt) {
		t.Fatalf("no-op patch: %d %s %s", same.status, same.body, same.header.Get("ETag"))
	}
	if empty := a.patch(u, conv.ID, `{}`, nil); empty.status != 200 || empty.header.Get("ETag") != r.header.Get("ETag") {
		t.Fatalf("empty patch: %d %s", empty.status, empty.body)
	}

	// A message reopens a snoozed conversation.
	a.post(u, conv.ID, `{"body":"wake up"}`)
	if got, _ := a.get(u, conv.ID); got.Status != "open" {
		t.Fatalf("status after a message to a snoozed conversation: %s", got.Status)
	}
	// Closed: a message is a 409 and changes nothing, until reopened.
	a.patch(u, conv.ID, `{"status":"closed"}`, nil)
	closed, closedTag := a.get(u, conv.ID)
	a.do(exchange{method: "POST", path: "/v1/conversations/" + conv.ID + "/messages", bearer: u, body: `{"body":"anyone?"}`}).
		problem(t, 409, "conversation_closed", "")
	if got, tag := a.get(u, conv.ID); tag != closedTag || !got.UpdatedAt.Equal(closed.UpdatedAt) {
		t.Fatalf("a refused message changed the conversation: %+v", got)
	}
	if list, _ := a.page(u, "/v1/conversations?status=closed"); len(list) != 1 || list[0].ID != conv.ID {
		t.Fatalf("status=closed lists %v", ids(list))
	}
	a.patch(u, conv.ID, `{"status":"open","subject":null}`, nil)
	if got, _ := a.get(u, conv.ID); got.Status != "open" || got.Subject != "" {
		t.Fatalf("reopened with subject null: %+v", got)
	}
	a.post(u, conv.ID, `{"body":"back again"}`)
}

func testBadPatch(t *testing.T, a *api) {
	u := a.user("acc_badpatch", "grace")
	conv := a.create(u, `{"subject":"keep"}`)
	before, tag := a.get(u, conv.ID)
	for _, tc := range []struct{ name, body, code, field string }{
		{"id", `{"id":"cnv_other"}`, "validation_failed", "id"},
		{"participants", `{"participants":["` + uid("mallory") + `"]}`, "validation_failed", "participants"},
		{"createdAt", `{"createdAt":"2020-01-01T00:00:00Z"}`, "validation_failed", "createdAt"},
		{"updatedAt", `{"updatedAt":"2020-01-01T00:00:00Z"}`, "validation_failed", "updatedAt"},
		{"lastMessageAt", `{"lastMessageAt":null}`, "validation_failed", "lastMessageAt"},
		{"unknown member", `{"priority":"high"}`, "validation_failed", "priority"},
		{"allowed with forbidden", `{"subject":"new","id":"x"}`, "validation_failed", "id"},
		{"unknown status", `{"status":"archived"}`, "validation_failed", "status"},
		{"status null", `{"status":null}`, "validation_failed", "status"},
		{"status a number", `{"status":1}`, "validation_failed", "status"},
		{"subject too long", `{"subject":"` + strings.Repeat("s", 301) + `"}`, "validation_failed", "subject"},
		{"subject an object", `{"subject":{"$set":"x"}}`, "validation_failed", "subject"},
		{"an array", `[{"op":"replace","path":"/subject","value":"x"}]`, "malformed_json", ""},
		{"null", `null`, "malformed_json", ""},
		{"a string", `"closed"`, "malformed_json", ""},
		{"malformed", `{"status":`, "malformed_json", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.do(exchange{method: "PATCH", path: "/v1/conversations/" + conv.ID, bearer: u, body: tc.body,
				contentType: "application/merge-patch+json", invalid: true}).problem(t, 400, tc.code, tc.field)
		})
	}
	a.do(exchange{method: "PATCH", path: "/v1/conversations/" + conv.ID, bearer: u, contentType: "application/merge-patch+json",
		invalid: true}).problem(t, 400, "malformed_json", "")
	// A JSON body without the merge patch media type: 415.
	a.do(exchange{method: "PATCH", path: "/v1/conversations/" + conv.ID, bearer: u, body: `{"status":"closed"}`, invalid: true}).
		problem(t, 415, "unsupported_media_type", "")
	a.do(exchange{method: "PATCH", path: "/v1/conversations/" + conv.ID, bearer: u, invalid: true,
		body: `{"subject":"` + strings.Repeat("s", 64<<10) + `"}`, contentType: "application/merge-patch+json"}).problem(t, 413, "body_too_large", "")
	after, now := a.get(u, conv.ID)
	if now != tag || after.Subject != "keep" || after.Status != "open" || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("bad patches changed the conversation: %+v %s", after, now)
	}
}

func testIfMatch(t *testing.T, a *api) {
	u := a.user("acc_ifmatch", "heidi")
	conv := a.create(u, `{}`)
	_, tag := a.get(u, conv.ID)
	ok := a.patch(u, conv.ID, `{"subject":"first"}`, map[string]string{"If-Match": tag})
	if ok.status != 200 {
		t.Fatalf("current tag: %d %s", ok.status, ok.body)
	}
	fresh := ok.header.Get("ETag")
	for name, stale := range map[string]string{"stale": tag, "weak": "W/" + fresh, "foreign": `"abc"`, "stale list": tag + `, "999"`} {
		t.Run(name, func(t *testing.T) {
			a.patch(u, conv.ID, `{"subject":"lost"}`, map[string]string{"If-Match": stale}).problem(t, 412, "precondition_failed", "")
			a.do(exchange{method: "PUT", path: "/v1/conversations/" + conv.ID + "/participants/" + uid("ivan"), bearer: u,
				header: map[string]string{"If-Match": stale}}).problem(t, 412, "precondition_failed", "")
			a.do(exchange{method: "DELETE", path: "/v1/conversations/" + conv.ID + "/participants/" + uid("heidi"), bearer: u,
				header: map[string]string{"If-Match": stale}}).problem(t, 412, "precondition_failed", "")
		})
	}
	for _, bad := range []string{`3`, `"3`, `W/3`, `"3" "4"`, `*, "3"`, `,`, `"a b"`} {
		t.Run("malformed "+bad, func(t *testing.T) {
			a.patch(u, conv.ID, `{"subject":"lost"}`, map[string]string{"If-Match": bad}).problem(t, 400, "validation_failed", "If-Match")
			a.do(exchange{method: "PUT", path: "/v1/conversations/" + conv.ID + "/participants/" + uid("ivan"), bearer: u,
				header: map[string]string{"If-Match": bad}, invalid: true}).problem(t, 400, "validation_failed", "If-Match")
			a.do(exchange{method: "DELETE", path: "/v1/conversations/" + conv.ID + "/participants/" + uid("heidi"), bearer: u,
				header: map[string]string{"If-Match": bad}, invalid: true}).problem(t, 400, "validation_failed", "If-Match")
		})
	}
	if got, now := a.get(u, conv.ID); got.Subject != "first" || now != fresh || len(got.Participants) != 1 {
		t.Fatalf("refused changes changed the conversation: %+v %s", got, now)
	}
	// A list holding the current tag, and *, match.
	if r := a.patch(u, conv.ID, `{"subject":"second"}`, map[string]string{"If-Match": `"999", ` + fresh}); r.status != 200 {
		t.Fatalf("list with the current tag: %d %s", r.status, r.body)
	}
	if r := a.patch(u, conv.ID, `{"subject":"third"}`, map[string]string{"If-Match": "*"}); r.status != 200 {
		t.Fatalf("If-Match *: %d %s", r.status, r.body)
	}
	// A message changes the tag too: an editor who has not seen it loses.
	_, beforeMessage := a.get(u, conv.ID)
	a.post(u, conv.ID, `{"body":"news"}`)
	a.patch(u, conv.ID, `{"status":"closed"}`, map[string]string{"If-Match": beforeMessage}).problem(t, 412, "precondition_failed", "")
}

// testConcurrentEditors: two editors holding the same ETag patch at once;
// exactly one wins, the other gets 412, every time.
func testConcurrentEditors(t *testing.T, a *api) {
	u := a.user("acc_race", "ivan")
	for round := range 10 {
		conv := a.create(u, `{}`)
		_, tag := a.get(u, conv.ID)
		var wg sync.WaitGroup
		statuses := make([]int, 2)
		subjects := []string{"editor A", "editor B"}
		for i := range 2 {
			wg.Go(func() {
				statuses[i] = a.patch(u, conv.ID, `{"subject":"`+subjects[i]+`"}`, map[string]string{"If-Match": tag}).status
			})
		}
		wg.Wait()
		slices.Sort(statuses)
		if statuses[0] != 200 || statuses[1] != 412 {
			t.Fatalf("round %d: statuses %v, want one 200 and one 412", round, statuses)
		}
		got, _ := a.get(u, conv.ID)
		if !slices.Contains(subjects, got.Subject) {
			t.Fatalf("round %d: subject %q", round, got.Subject)
		}
	}
}

// testConcurrentMessages: messages posted at once all count; lastMessageAt
// ends at the newest, and neither it nor updatedAt ever moves backwards.
func testConcurrentMessages(t *testing.T, a *api) {
	u := a.user("acc_msgrace", "judy")
	conv := a.create(u, `{"status":"snoozed"}`)
	const n = 12
	posted := make([]message, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := a.do(exchange{method: "POST", path: "/v1/conversations/" + conv.ID + "/messages", bearer: u, body: fmt.Sprintf(`{"body":"m%d"}`, i)})
			if r.status != http.StatusCreated {
				t.Errorf("post %d: %d %s", i, r.status, r.body)
			}
			json.Unmarshal(r.body, &posted[i])
		})
	}
	wg.Wait()
	newest := posted[0].CreatedAt
	for _, m := range posted {
		if m.CreatedAt.After(newest) {
			newest = m.CreatedAt
		}
	}
	got, _ := a.get(u, conv.ID)
	if got.LastMessageAt == nil || !got.LastMessageAt.Equal(newest) || got.UpdatedAt.Before(newest) || got.Status != "open" {
		t.Fatalf("after %d concurrent posts: %+v, newest message %v", n, got, newest)
	}
	if list, _ := a.messages(u, "/v1/conversations/"+conv.ID+"/messages?limit=100"); len(list) != n {
		t.Fatalf("%d messages listed, want %d", len(list), n)
	}
}

func testParticipants(t *testing.T, a *api) {
	u, kim := a.user("acc_part", "judy"), a.user("acc_part", "kim")
	conv := a.create(u, `{}`)
	base := "/v1/conversations/" + conv.ID + "/participants/"
	r := a.do(exchange{method: "PUT", path: base + uid("kim"), bearer: u})
	if r.status != 204 || len(r.body) != 0 || r.header.Get("ETag") == "" {
		t.Fatalf("add kim: %d %q %q", r.status, r.body, r.header.Get("ETag"))
	}
	got, tag := a.get(kim, conv.ID)
	if !slices.Equal(got.Participants, []string{uid("judy"), uid("kim")}) || tag != r.header.Get("ETag") {
		t.Fatalf("after adding kim: %+v %s", got, tag)
	}
	// Idempotent: again, nothing changes.
	if again := a.do(exchange{method: "PUT", path: base + uid("kim"), bearer: u}); again.status != 204 || again.header.Get("ETag") != tag {
		t.Fatalf("add kim again: %d %s", again.status, again.header.Get("ETag"))
	}
	// kim leaves: the conversation is a 404 for kim then.
	if r := a.do(exchange{method: "DELETE", path: base + uid("kim"), bearer: kim}); r.status != 204 {
		t.Fatalf("kim leaves: %d %s", r.status, r.body)
	}
	a.do(exchange{method: "GET", path: "/v1/conversations/" + conv.ID, bearer: kim}).problem(t, 404, "not_found", "")
	_, tag = a.get(u, conv.ID)
	if again := a.do(exchange{method: "DELETE", path: base + uid("kim"), bearer: u}); again.status != 204 || again.header.Get("ETag") != tag {
		t.Fatalf("remove absent kim: %d %s", again.status, again.header.Get("ETag"))
	}
	a.do(exchange{method: "DELETE", path: base + uid("judy"), bearer: u}).problem(t, 409, "last_participant", "")
	a.do(exchange{method: "PUT", path: base + strings.Repeat("u", 129), bearer: u, invalid: true}).problem(t, 400, "validation_failed", "userId")
	a.do(exchange{method: "DELETE", path: base + strings.Repeat("u", 129), bearer: u, invalid: true}).problem(t, 400, "validation_failed", "userId")

	// 100 participants at most.
	many := make([]string, 99)
	for i := range many {
		many[i] = uid(fmt.Sprintf("p%d", i))
	}
	list, _ := json.Marshal(many)
	full := a.create(u, `{"participants":`+string(list)+`}`)
	fullBase := "/v1/conversations/" + full.ID + "/participants/"
	_, fullTag := a.get(u, full.ID)
	a.do(exchange{method: "PUT", path: fullBase + uid("one-too-many"), bearer: u}).problem(t, 409, "too_many_participants", "")
	if got, now := a.get(u, full.ID); len(got.Participants) != 100 || now != fullTag {
		t.Fatalf("refused add changed the conversation: %d participants", len(got.Participants))
	}
	// Adding an existing one to a full conversation is still fine.
	if r := a.do(exchange{method: "PUT", path: fullBase + uid("p5"), bearer: u}); r.status != 204 {
		t.Fatalf("add existing to full: %d", r.status)
	}
}

func testUpdatedAtForward(t *testing.T, a *api) {
	u := a.user("acc_forward", "leo")
	conv := a.create(u, `{}`)
	prev, prevTag := a.get(u, conv.ID)
	steps := []exchange{
		{method: "PATCH", path: "/v1/conversations/" + conv.ID, body: `{"subject":"a"}`, contentType: "application/merge-patch+json"},
		{method: "PUT", path: "/v1/conversations/" + conv.ID + "/participants/" + uid("mia")},
		{method: "POST", path: "/v1/conversations/" + conv.ID + "/messages", body: `{"body":"x"}`},
		{method: "PATCH", path: "/v1/conversations/" + conv.ID, body: `{"status":"snoozed"}`, contentType: "application/merge-patch+json"},
		{method: "POST", path: "/v1/conversations/" + conv.ID + "/messages", body: `{"body":"y"}`},
		{method: "DELETE", path: "/v1/conversations/" + conv.ID + "/participants/" + uid("mia")},
		{method: "PATCH", path: "/v1/conversations/" + conv.ID, body: `{"subject":"b"}`, contentType: "application/merge-patch+json"},
	}
	// Quickly, so that several steps fall within one millisecond.
	for i, x := range steps {
		x.bearer = u
		if r := a.do(x); r.status >= 300 {
			t.Fatalf("step %d: %d %s", i, r.status, r.body)
		}
		got, tag := a.get(u, conv.ID)
		if !got.UpdatedAt.After(prev.UpdatedAt) || tag == prevTag {
			t.Fatalf("step %d (%s %s): updatedAt %v after %v, ETag %s after %s", i, x.method, x.path, got.UpdatedAt, prev.UpdatedAt, tag, prevTag)
		}
		prev, prevTag = got, tag
	}
}

func testUpdatedAfter(t *testing.T, a *api) {
	u := a.user("acc_sync", "nina")
	var all []conversation
	for i := range 6 {
		status := "open"
		if i%2 == 1 {
			status = "closed"
		}
		all = append(all, a.create(u, `{"status":"`+status+`"}`))
	}
	mark := all[2].UpdatedAt
	since := url.QueryEscape(mark.Format(time.RFC3339Nano))
	list, _ := a.page(u, "/v1/conversations?limit=100&updatedAfter="+since)
	for _, c := range list {
		if !c.UpdatedAt.After(mark) {
			t.Fatalf("updatedAfter=%s listed %s updated at %v", since, c.ID, c.UpdatedAt)
		}
	}
	if want := countAfter(all, mark, ""); len(list) != want {
		t.Fatalf("updatedAfter lists %d, want %d", len(list), want)
	}
	// A change moves an old conversation into the sync window.
	a.patch(u, all[0].ID, `{"subject":"changed"}`, nil)
	list, _ = a.page(u, "/v1/conversations?limit=100&updatedAfter="+since)
	if list[0].ID != all[0].ID {
		t.Fatalf("the changed conversation is not first: %v", ids(list))
	}
	// Combined with status and paging: the link keeps both, the cursor is
	// bound to both.
	page1, next := a.page(u, "/v1/conversations?limit=1&status=closed&updatedAfter="+since)
	if len(page1) != 1 || !strings.Contains(next, "updatedAfter=") || !strings.Contains(next, "status=closed") {
		t.Fatalf("page 1: %v, next %q", ids(page1), next)
	}
	rest := page1
	for next != "" {
		var p []conversation
		p, next = a.page(u, next)
		rest = append(rest, p...)
	}
	if want := countAfter(all, mark, "closed"); len(rest) != want {
		t.Fatalf("closed since mark: %d, want %d", len(rest), want)
	}
	_, next = a.page(u, "/v1/conversations?limit=1&updatedAfter="+since)
	link, _ := url.Parse(next)
	cur := "cursor=" + url.QueryEscape(link.Query().Get("cursor"))
	for _, q := range []string{
		"updatedAfter=" + url.QueryEscape(mark.Add(-time.Second).Format(time.RFC3339Nano)) + "&" + cur, // another updatedAfter
		cur, // none
	} {
		a.do(exchange{method: "GET", path: "/v1/conversations?" + q, bearer: u, invalid: true}).problem(t, 400, "validation_failed", "cursor")
	}
	for _, bad := range []string{"yesterday", "2024-05-01", "2024-05-01T12:00:00", "2024-05-01 12:00:00Z", "", "1714564800"} {
		a.do(exchange{method: "GET", path: "/v1/conversations?updatedAfter=" + url.QueryEscape(bad), bearer: u, invalid: true}).
			problem(t, 400, "validation_failed", "updatedAfter")
	}
	a.do(exchange{method: "GET", path: "/v1/conversations?updatedAfter=" + since + "&updatedAfter=" + since, bearer: u, invalid: true}).
		problem(t, 400, "validation_failed", "updatedAfter")
	// An offset other than Z works (sent as %2B).
	if l, _ := a.page(u, "/v1/conversations?limit=100&updatedAfter="+url.QueryEscape(mark.In(time.FixedZone("", 3600)).Format(time.RFC3339Nano))); len(l) != len(list) {
		t.Fatalf("+01:00 offset lists %d, want %d", len(l), len(list))
	}
}

// countAfter counts the conversations updated after mark (with status, when
// given), as the server stores them now.
func countAfter(created []conversation, mark time.Time, status string) int {
	n := 0
	for _, c := range created {
		if c.UpdatedAt.After(mark) && (status == "" || c.Status == status) {
			n++
		}
	}
	return n
}

func testIdempotency(t *testing.T, a *api) {
	u := a.user("acc_idem", "olga")
	key := map[string]string{"Idempotency-Key": "create-1"}
	first := a.do(exchange{method: "POST", path: "/v1/conversations", bearer: u, body: `{"subject":"once"}`, header: key})
	// The same body with other whitespace is the same request.
	second := a.do(exchange{method: "POST", path: "/v1/conversations", bearer: u, body: "{ \"subject\" : \"once\" }\n", header: key})
	if first.status != 201 || second.status != 201 || string(first.body) != string(second.body) ||
		first.header.Get("Location") != second.header.Get("Location") || first.header.Get("ETag") != second.header.Get("ETag") ||
		second.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("replay:\n%d %s %v\n%d %s %v", first.status, first.body, first.header, second.status, second.body, second.header)
	}
	var conv conversation
	json.Unmarshal(first.body, &conv)
	if list, _ := a.page(u, "/v1/conversations"); len(list) != 1 {
		t.Fatalf("a retried create made %d conversations", len(list))
	}
	a.do(exchange{method: "POST", path: "/v1/conversations", bearer: u, body: `{"subject":"twice"}`, header: key}).
		problem(t, 422, "idempotency_key_reused", "")
	// The same key on another route is another request.
	a.do(exchange{method: "POST", path: "/v1/conversations/" + conv.ID + "/messages", bearer: u, body: `{"subject":"once"}`, header: key, invalid: true}).
		problem(t, 400, "validation_failed", "body")
	a.do(exchange{method: "POST", path: "/v1/conversations/" + conv.ID + "/messages", bearer: u, body: `{"body":"x"}`, header: key}).
		problem(t, 422, "idempotency_key_reused", "")

	// Messages: a replay creates nothing and returns the first response,
	// also after the conversation changed.
	mkey := map[string]string{"Idempotency-Key": "message-1"}
	path := "/v1/conversations/" + conv.ID + "/messages"
	m1 := a.do(exchange{method: "POST", path: path, bearer: u, body: `{"body":"hello"}`, header: mkey})
	_, tag := a.get(u, conv.ID)
	m2 := a.do(exchange{method: "POST", path: path, bearer: u, body: `{"body":"hello"}`, header: mkey})
	if m1.status != 201 || m2.status != 201 || string(m1.body) != string(m2.body) || m1.header.Get("Location") != m2.header.Get("Location") {
		t.Fatalf("message replay:\n%s\n%s", m1.body, m2.body)
	}
	if list, _ := a.messages(u, path); len(list) != 1 {
		t.Fatalf("a retried post made %d messages", len(list))
	}
	if _, now := a.get(u, conv.ID); now != tag {
		t.Fatal("a replay changed the conversation")
	}
	a.do(exchange{method: "POST", path: path, bearer: u, body: `{"body":"hello!"}`, header: mkey}).problem(t, 422, "idempotency_key_reused", "")

	// Keys are per caller: another user's same key is theirs.
	peer := a.user("acc_idem", "pia")
	if r := a.do(exchange{method: "POST", path: "/v1/conversations", bearer: peer, body: `{"subject":"once"}`, header: key}); r.status != 201 || string(r.body) == string(first.body) {
		t.Fatalf("another caller's key: %d %s", r.status, r.body)
	}
	// A failed request leaves no response: after reopening, the retry
	// with the same key and body posts.
	a.patch(u, conv.ID, `{"status":"closed"}`, nil)
	ckey := map[string]string{"Idempotency-Key": "after-close"}
	a.do(exchange{method: "POST", path: path, bearer: u, body: `{"body":"late"}`, header: ckey}).problem(t, 409, "conversation_closed", "")
	a.patch(u, conv.ID, `{"status":"open"}`, nil)
	if r := a.do(exchange{method: "POST", path: path, bearer: u, body: `{"body":"late"}`, header: ckey}); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after a failure: %d %s", r.status, r.body)
	}

	for name, k := range map[string]string{"too long": strings.Repeat("k", 256), "control character": "a\tb", "not ASCII": "clé"} {
		t.Run(name, func(t *testing.T) {
			a.do(exchange{method: "POST", path: "/v1/conversations", bearer: u, body: `{}`, header: map[string]string{"Idempotency-Key": k}, invalid: true}).
				problem(t, 400, "validation_failed", "Idempotency-Key")
		})
	}
	if r := a.do(exchange{method: "POST", path: "/v1/conversations", bearer: u, body: `{}`, header: map[string]string{"Idempotency-Key": strings.Repeat("k", 255)}}); r.status != 201 {
		t.Fatalf("255-character key: %d %s", r.status, r.body)
	}
	// Two Idempotency-Key headers are ambiguous.
	req, _ := http.NewRequest("POST", a.srv.URL+"/v1/conversations", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+u)
	req.Header.Add("Idempotency-Key", "a")
	req.Header.Add("Idempotency-Key", "b")
	resp, body := a.doc.DoResponseOnly(t, a.srv.Client(), req)
	response{resp.StatusCode, resp.Header, body}.problem(t, 400, "validation_failed", "Idempotency-Key")
}

// testConcurrentIdempotentRequestsCreateOne: the same request with one key
// sent many times at once creates one resource, and every answer is a 201
// naming it.
func testConcurrentIdempotency(t *testing.T, a *api) {
	u := a.user("acc_idemrace", "quinn")
	host := a.create(u, `{}`)
	for round := range 3 {
		for _, x := range []exchange{
			{method: "POST", path: "/v1/conversations", body: `{"subject":"race"}`},
			{method: "POST", path: "/v1/conversations/" + host.ID + "/messages", body: `{"body":"race"}`},
		} {
			x.bearer = u
			x.header = map[string]string{"Idempotency-Key": fmt.Sprintf("race-%d-%s", round, x.path)}
			const n = 8
			locations := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					r := a.do(x)
					if r.status != http.StatusCreated {
						t.Errorf("%s %d: %d %s", x.path, i, r.status, r.body)
					}
					locations[i] = r.header.Get("Location")
				})
			}
			wg.Wait()
			for _, l := range locations {
				if l != locations[0] || l == "" {
					t.Fatalf("round %d %s: locations %v", round, x.path, locations)
				}
			}
		}
	}
	convs, _ := a.page(u, "/v1/conversations?limit=100")
	msgs, _ := a.messages(u, "/v1/conversations/"+host.ID+"/messages?limit=100")
	if len(convs) != 1+3 || len(msgs) != 3 {
		t.Fatalf("%d conversations (want 4), %d messages (want 3)", len(convs), len(msgs))
	}
}

// insertMessage stores m as the first write of a post alone (what a post
// that stopped before its second write leaves), with a new id, and returns
// it as stored.
func (a *api) insertMessage(m conversations.Message) (conversations.Message, error) {
	m.ID, m.Metadata, m.CreatedAt = conversations.NewMessageID(), []byte(`{}`), m.CreatedAt.UTC().Truncate(time.Millisecond)
	return m, a.store.InsertMessage(context.Background(), m)
}

// testCrashRepair provokes a post that stopped between its two writes: the
// message is stored (the store's first write alone), the conversation is
// not told. Nothing is lost: the message is listed, and that read records
// it in the conversation, which reopens and rises to the top of the list.
func testCrashRepair(t *testing.T, a *api) {
	u := a.user("acc_crash", "rita")
	conv := a.create(u, `{"status":"snoozed"}`)
	newer := a.create(u, `{}`)
	before, tag := a.get(u, conv.ID)
	stored, err := a.insertMessage(conversations.Message{
		AccountID: "acc_crash", ConversationID: conv.ID, Author: "rita", Body: "written, then the process died",
		CreatedAt: time.Now().Add(time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	stale, staleTag := a.get(u, conv.ID)
	if stale.LastMessageAt != nil || staleTag != tag || stale.Status != "snoozed" {
		t.Fatalf("the first write alone changed the conversation: %+v", stale)
	}
	if list, _ := a.page(u, "/v1/conversations"); list[0].ID != newer.ID {
		t.Fatal("setup: the crashed conversation is already first")
	}
	list, _ := a.messages(u, "/v1/conversations/"+conv.ID+"/messages")
	if len(list) != 1 || list[0].ID != stored.ID || !list[0].CreatedAt.Equal(stored.CreatedAt) {
		t.Fatalf("the message is not listed: %+v", list)
	}
	repaired, repairedTag := a.get(u, conv.ID)
	if repaired.LastMessageAt == nil || !repaired.LastMessageAt.Equal(stored.CreatedAt) || !repaired.UpdatedAt.Equal(stored.CreatedAt) ||
		repaired.Status != "open" || repairedTag == tag || !repaired.UpdatedAt.After(before.UpdatedAt) {
		t.Fatalf("after the read: %+v, message at %v", repaired, stored.CreatedAt)
	}
	if list, _ := a.page(u, "/v1/conversations"); list[0].ID != conv.ID {
		t.Fatalf("the repaired conversation is not first: %v", ids(list))
	}
	// Reading again changes nothing more.
	a.messages(u, "/v1/conversations/"+conv.ID+"/messages")
	if _, again := a.get(u, conv.ID); again != repairedTag {
		t.Fatal("a second read changed the conversation again")
	}

	// A stopped post is also repaired by the next post, and by reading the
	// message alone.
	other := a.create(u, `{}`)
	lost, _ := a.insertMessage(conversations.Message{
		AccountID: "acc_crash", ConversationID: other.ID, Author: "rita", Body: "lost?", CreatedAt: time.Now(),
	})
	a.do(exchange{method: "GET", path: "/v1/conversations/" + other.ID + "/messages/" + lost.ID, bearer: u})
	if got, _ := a.get(u, other.ID); got.LastMessageAt == nil || !got.LastMessageAt.Equal(lost.CreatedAt) {
		t.Fatalf("GET of the message did not record it: %+v", got)
	}
	third := a.create(u, `{}`)
	a.insertMessage(conversations.Message{
		AccountID: "acc_crash", ConversationID: third.ID, Author: "rita", Body: "stopped", CreatedAt: time.Now(),
	})
	next := a.post(u, third.ID, `{"body":"next"}`)
	if got, _ := a.get(u, third.ID); !got.LastMessageAt.Equal(next.CreatedAt) {
		t.Fatalf("next post: %+v", got)
	}
	if list, _ := a.messages(u, "/v1/conversations/"+third.ID+"/messages"); len(list) != 2 || !slices.ContainsFunc(list, func(m message) bool { return m.ID == next.ID }) {
		t.Fatalf("messages after the next post: %+v", list)
	}
}

func testBearerOnNewRoutes(t *testing.T, a *api) {
	u := a.user("acc_bearer2", "sam")
	conv := a.create(u, `{}`)
	m := a.post(u, conv.ID, `{"body":"x"}`)
	base := "/v1/conversations/" + conv.ID
	for _, x := range []exchange{
		{method: "PATCH", path: base, body: `{"subject":"x"}`, contentType: "application/merge-patch+json"},
		{method: "PUT", path: base + "/participants/" + uid("tom")},
		{method: "DELETE", path: base + "/participants/" + uid("sam")},
		{method: "POST", path: base + "/messages", body: `{"body":"x"}`},
		{method: "GET", path: base + "/messages"},
		{method: "GET", path: base + "/messages/" + m.ID},
		{method: "GET", path: "/v1/events"},
		{method: "GET", path: "/v1/events/stream"},
	} {
		x.invalid = true
		r := a.do(x)
		r.problem(t, 401, "invalid_token", "")
		if r.header.Get("WWW-Authenticate") != `Bearer error="invalid_token"` {
			t.Errorf("%s %s: WWW-Authenticate %q", x.method, x.path, r.header.Get("WWW-Authenticate"))
		}
	}
}
