package http_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/services/conversations"
	conversationshttp "github.com/acme/platform/services/conversations/http"
)

type event struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	Sequence  int64     `json:"sequence"`
	Timestamp time.Time `json:"timestamp"`
	Data      struct {
		Conversation conversation      `json:"conversation"`
		Changes      map[string]string `json:"changes"`
		UserID       string            `json:"userId"`
		Message      *message          `json:"message"`
	} `json:"data"`
}

var eventsLink = regexp.MustCompile(`^<(/v1/events\?[^>]*after=([0-9]+)[^>]*)>; rel="next"$`)

// events reads one page of the feed at path and returns it with the
// position its Link names (every page has one).
func (a *api) events(bearer, path string) ([]event, int64) {
	a.t.Helper()
	r := a.send("GET", path, bearer, "", true)
	list, _ := listed[event](a, path, r, regexp.MustCompile(`^<(.*)>; rel="next"$`))
	m := eventsLink.FindStringSubmatch(r.header.Get("Link"))
	if m == nil {
		a.t.Fatalf("GET %s: Link %q", path, r.header.Get("Link"))
	}
	next, _ := strconv.ParseInt(m[2], 10, 64)
	return list, next
}

func eventTypes(list []event) []string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.Type
	}
	return out
}

// story creates a conversation as bearer, posts a message and closes it:
// the three events of the client suites.
func (a *api) story(bearer string) conversation {
	a.t.Helper()
	c := a.create(bearer, `{"subject":"story"}`)
	a.post(bearer, c.ID, `{"body":"hello"}`)
	if r := a.patch(bearer, c.ID, `{"status":"closed"}`, nil); r.status != 200 {
		a.t.Fatalf("close: %d %s", r.status, r.body)
	}
	return c
}

var storyTypes = []string{"conversation.created", "message.created", "conversation.updated"}

func testEventFeed(t *testing.T, a *api) {
	const acc = "acc_feed"
	alice, bob := a.user(acc, "alice"), a.user(acc, "bob")
	reader := a.client(acc, "cli_feed", token.ScopeConversationsRead)
	if list, next := a.events(reader, "/v1/events"); len(list) != 0 || next != 0 {
		t.Fatalf("empty feed: %v, next %d", list, next)
	}
	c := a.story(alice)
	a.relay()
	list, next := a.events(alice, "/v1/events")
	if !slices.Equal(eventTypes(list), storyTypes) || next != list[2].Sequence {
		t.Fatalf("alice: %v, next %d", eventTypes(list), next)
	}
	if list[0].Data.Conversation.ID != c.ID || list[1].Data.Message == nil || list[1].Data.Message.Body != "hello" ||
		list[2].Data.Changes["status"] != "open" || list[2].Data.Conversation.Status != "closed" {
		t.Fatalf("data: %+v", list)
	}
	// Up to date: an empty page that keeps the position.
	if more, again := a.events(alice, fmt.Sprintf("/v1/events?after=%d", next)); len(more) != 0 || again != next {
		t.Fatalf("after the newest: %v, next %d", more, again)
	}
	// Bob took no part: nothing, but his position moves past it all.
	if seen, bobNext := a.events(bob, "/v1/events?limit=5"); len(seen) != 0 || bobNext != next {
		t.Fatalf("bob: %v, next %d", seen, bobNext)
	}
	// The service client sees the account, one page at a time, the
	// filters kept in the Link.
	var paged []event
	path := "/v1/events?limit=1"
	for range 5 {
		page, n := a.events(reader, path)
		paged = append(paged, page...)
		if len(page) == 0 {
			break
		}
		path = fmt.Sprintf("/v1/events?after=%d&limit=1", n)
	}
	if !slices.Equal(eventTypes(paged), storyTypes) {
		t.Fatalf("paged: %v", eventTypes(paged))
	}
	r := a.send("GET", "/v1/events?types=message.created,conversation.created&limit=7", reader, "", true)
	filtered, _ := listed[event](a, "", r, regexp.MustCompile(`^<(.*)>; rel="next"$`))
	if !slices.Equal(eventTypes(filtered), storyTypes[:2]) ||
		r.header.Get("Link") != fmt.Sprintf(`</v1/events?after=%d&limit=7&types=message.created%%2Cconversation.created>; rel="next"`, next) {
		t.Fatalf("filtered: %v, Link %q", eventTypes(filtered), r.header.Get("Link"))
	}
}

func testBadEventParameters(t *testing.T, a *api) {
	const acc = "acc_badevents"
	alice := a.user(acc, "alice")
	a.story(alice)
	a.relay()
	before, next := a.events(alice, "/v1/events")
	for path, field := range map[string]string{
		"/v1/events?after=abc":                 "after",
		"/v1/events?after=-1":                  "after",
		"/v1/events?after=1.5":                 "after",
		"/v1/events?after=1&after=2":           "after",
		"/v1/events?types=message.deleted":     "types",
		"/v1/events?types=":                    "types",
		"/v1/events?types=message.created,":    "types",
		"/v1/events?limit=0":                   "limit",
		"/v1/events?limit=1001":                "limit",
		"/v1/events?limit=x":                   "limit",
		"/v1/events/stream?after=x":            "after",
		"/v1/events/stream?types=conversation": "types",
	} {
		x := exchange{method: "GET", path: path, bearer: alice, invalid: true}
		a.do(x).problem(t, 400, "validation_failed", field)
	}
	for _, id := range []string{"abc", "-3", "1e3", ""} {
		x := exchange{method: "GET", path: "/v1/events/stream?after=0", bearer: alice, invalid: true, header: map[string]string{"Last-Event-ID": id}}
		a.do(x).problem(t, 400, "validation_failed", "Last-Event-ID")
	}
	if after, again := a.events(alice, "/v1/events"); len(after) != len(before) || again != next {
		t.Fatalf("bad requests changed the feed: %v, %d", eventTypes(after), again)
	}
}

func testEventsBelowThePurge(t *testing.T, a *api) {
	const acc = "acc_purged"
	alice := a.user(acc, "alice")
	a.story(alice)
	a.story(alice)
	a.relay()
	all, _ := a.events(alice, "/v1/events")
	svc := &conversations.Service{Store: a.store}
	// Everything recorded before this account's newest event is old (the
	// other subtests' accounts too: this one runs after theirs).
	if _, err := svc.PurgeEvents(context.Background(), all[5].Timestamp.Add(time.Millisecond), 0); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/events?after=0", "/v1/events/stream?after=0"} {
		r := a.do(exchange{method: "GET", path: path, bearer: alice})
		r.problem(t, 410, "cursor_expired", "")
	}
	r := a.do(exchange{method: "GET", path: "/v1/events/stream?after=999", bearer: alice, header: map[string]string{"Last-Event-ID": "1"}})
	r.problem(t, 410, "cursor_expired", "")
	// From the oldest kept: the account's newest event only.
	if kept, next := a.events(alice, "/v1/events"); len(kept) != 1 || kept[0].ID != all[5].ID || next != all[5].Sequence {
		t.Fatalf("kept: %v, next %d", eventTypes(kept), next)
	}
}

// sse is an open event stream.
type sse struct {
	t    *testing.T
	resp *http.Response
	read *bufio.Reader
}

func (a *api) openStream(bearer, path string, header map[string]string) *sse {
	a.t.Helper()
	s, status := a.tryStream(bearer, path, header)
	if s == nil {
		a.t.Fatalf("stream: %d", status)
	}
	return s
}

// tryStream opens a stream like openStream, but returns nil and the
// status when the service answers anything but a stream.
func (a *api) tryStream(bearer, path string, header map[string]string) (*sse, int) {
	a.t.Helper()
	req, _ := http.NewRequest("GET", a.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		return nil, resp.StatusCode
	}
	a.doc.CheckResponse(a.t, req, resp, nil)
	return &sse{t: a.t, resp: resp, read: bufio.NewReader(resp.Body)}, resp.StatusCode
}

// next returns the next message of the stream: its fields (id, event,
// data, retry) or, for a comment, ":" and the comment; nil at the end.
func (s *sse) next() map[string]string {
	s.t.Helper()
	msg := map[string]string{}
	for {
		line, err := s.read.ReadString('\n')
		if err != nil {
			if len(msg) == 0 {
				return nil
			}
			return msg
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if len(msg) > 0 {
				return msg
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			msg[":"] = strings.TrimSpace(line[1:])
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		msg[k] = strings.TrimPrefix(v, " ")
	}
}

// nextEvent skips comments and returns the next event.
func (s *sse) nextEvent() event {
	s.t.Helper()
	for {
		msg := s.next()
		if msg == nil {
			s.t.Fatal("the stream ended")
		}
		if msg["data"] == "" {
			continue
		}
		var e event
		if err := json.Unmarshal([]byte(msg["data"]), &e); err != nil {
			s.t.Fatalf("data %q: %v", msg["data"], err)
		}
		if msg["id"] != strconv.FormatInt(e.Sequence, 10) || msg["event"] != e.Type {
			s.t.Fatalf("message %v does not name its event", msg)
		}
		return e
	}
}

// end reads to the end of the stream and returns its last message.
func (s *sse) end() map[string]string {
	s.t.Helper()
	var last map[string]string
	for msg := s.next(); msg != nil; msg = s.next() {
		last = msg
	}
	return last
}

func testEventStream(t *testing.T, a *api) {
	const acc = "acc_stream"
	alice := a.user(acc, "alice")
	stream := a.openStream(alice, "/v1/events/stream", nil)
	if msg := stream.next(); msg[":"] == "" {
		t.Fatalf("first message %v, want a comment", msg)
	}
	a.story(alice)
	a.relay()
	var got []event
	for range 3 {
		got = append(got, stream.nextEvent())
	}
	if !slices.Equal(eventTypes(got), storyTypes) {
		t.Fatalf("streamed %v", eventTypes(got))
	}
	stream.resp.Body.Close() // dropped
	// Resumed: Last-Event-ID wins over the after of the original URL.
	a.story(alice)
	a.relay()
	resumed := a.openStream(alice, "/v1/events/stream?after=0", map[string]string{"Last-Event-ID": strconv.FormatInt(got[1].Sequence, 10)})
	// Closed when this test ends, not TestAPI: while a stream is open the
	// hub reads the log every Interval.
	defer resumed.resp.Body.Close()
	var rest []event
	for range 4 {
		rest = append(rest, resumed.nextEvent())
	}
	if rest[0].ID != got[2].ID || !slices.Equal(eventTypes(rest[1:]), storyTypes) {
		t.Fatalf("resumed: %v", eventTypes(rest))
	}
	// Filtered by type.
	filtered := a.openStream(alice, "/v1/events/stream?types=conversation.updated", nil)
	defer filtered.resp.Body.Close()
	if e := filtered.nextEvent(); e.ID != got[2].ID {
		t.Fatalf("filtered: %+v", e)
	}
}

func testTooManyStreams(t *testing.T, a *api) {
	const acc = "acc_streams"
	reader := a.client(acc, "cli_streams", token.ScopeConversationsRead)
	var open []*sse
	for range conversationshttp.DefaultMaxStreamsPerCaller {
		open = append(open, a.openStream(reader, "/v1/events/stream", nil))
	}
	r := a.do(exchange{method: "GET", path: "/v1/events/stream", bearer: reader})
	r.problem(t, 429, "too_many_requests", "")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// Another caller of the account is not counted against it.
	other := a.openStream(a.user(acc, "alice"), "/v1/events/stream", nil)
	other.resp.Body.Close()
	for _, s := range open {
		s.resp.Body.Close()
	}
}

// TestEventStreamEnds: a stream ends with retry: when its token expires
// and when the replica stops; it says something at least every keep-alive
// interval meanwhile.
func TestEventStreamEnds(t *testing.T) {
	t.Parallel()
	a := newAPIWith(t, func(d *conversationshttp.Deps) {
		d.Stream = conversationshttp.StreamConfig{KeepAlive: 20 * time.Millisecond, Retry: 3 * time.Second}
	})
	// Something at least every keep-alive interval.
	alive := a.openStream(a.user("acc_ends", "alive"), "/v1/events/stream", nil)
	for msg := alive.next(); msg[":"] != "keep-alive"; msg = alive.next() {
		if msg == nil {
			t.Fatal("the stream ended")
		}
	}
	alive.resp.Body.Close()
	// The token expires (in a second): the stream ends, with retry:. On a
	// machine slow enough that the token expired before the stream opened,
	// the same again with a longer lifetime.
	var set token.Set
	for ttl := time.Second; ; ttl *= 2 {
		issuer, err := token.NewIssuer(token.IssuerConfig{Issuer: issuerURL, Audience: []string{audience}, Keys: a.tokens.Keys, TokenTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		set, err = issuer.Mint(context.Background(), token.Subject{UserID: uid("brief"), AccountID: "acc_ends", AccountName: "acc_ends", Username: "brief"})
		if err != nil {
			t.Fatal(err)
		}
		short, status := a.tryStream(set.IDToken, "/v1/events/stream", nil)
		if short == nil {
			if status == 401 && ttl < 16*time.Second {
				continue
			}
			t.Fatalf("stream with a %s token: %d", ttl, status)
		}
		if last := short.end(); last["retry"] != "3000" {
			t.Fatalf("at expiry: last %v", last)
		}
		break
	}
	// Reconnecting with the expired token, within the verifier's leeway,
	// opens no stream: the client must renew it.
	r := a.do(exchange{method: "GET", path: "/v1/events/stream", bearer: set.IDToken})
	r.problem(t, 401, "invalid_token", "")
	if got := r.header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) {
		t.Errorf("WWW-Authenticate = %q", got)
	}
	if r := a.do(exchange{method: "GET", path: "/v1/events", bearer: set.IDToken}); r.status != 200 {
		t.Errorf("the feed within the leeway: %d, want 200", r.status)
	}

	stopping := a.openStream(a.user("acc_ends", "long"), "/v1/events/stream", nil)
	stopping.next()
	a.hub.Close() // SIGTERM
	if last := stopping.end(); last["retry"] != "3000" {
		t.Fatalf("at shutdown: last %v", last)
	}
	r = a.do(exchange{method: "GET", path: "/v1/events/stream", bearer: a.user("acc_ends", "late")})
	r.problem(t, 503, "service_unavailable", "")
}

// TestSlowStreamIsDropped: a stream that does not take its events is
// dropped once its buffer is full, not buffered without bound.
func TestSlowStreamIsDropped(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	hub := &conversations.Hub{Store: a.store, Interval: time.Hour}
	defer hub.Close()
	dropped := make(chan bool, 1)
	hub.Dropped = func(slow bool) { dropped <- slow }
	who := conversations.Caller{AccountID: "acc_slow", ID: "cli", Client: true}
	sub, err := hub.Subscribe(who, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	svc := &conversations.Service{Store: a.store}
	c, err := svc.CreateConversation(context.Background(), who, conversations.Conversation{Status: conversations.StatusOpen, Participants: []string{"usr_1"}})
	if err != nil {
		t.Fatal(err)
	}
	// Each poll hands the stream one batch; it never reads.
	for i := 0; ; i++ {
		if _, err := svc.PostMessage(context.Background(), who, conversations.Message{ConversationID: c.ID, Body: "x"}); err != nil {
			t.Fatal(err)
		}
		a.relay()
		hub.Poll(context.Background())
		select {
		case slow := <-dropped:
			if !slow || i < 16 {
				t.Fatalf("dropped after %d batches, slow %v", i, slow)
			}
			n := 0
			for range sub.Events {
				n++
			}
			if n != 16 || sub.Reason() != conversations.ErrSlowReader {
				t.Fatalf("%d batches buffered, reason %v", n, sub.Reason())
			}
			return
		default:
		}
	}
}
