package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The event types of the feed, the stream and webhooks.
const (
	EventConversationCreated            = "conversation.created"
	EventConversationUpdated            = "conversation.updated"
	EventConversationParticipantAdded   = "conversation.participant_added"
	EventConversationParticipantRemoved = "conversation.participant_removed"
	EventMessageCreated                 = "message.created"
	// EventWebhookTest is a test delivery to one webhook endpoint
	// (Client.TestWebhook), never in the feed: Sequence 0, Data.EndpointID.
	EventWebhookTest = "webhook.test"
)

// Event is one change of a conversation of the caller's account. Sequence
// orders the events of the account: store the Sequence of the last event
// handled, and resume from it (Events, FollowEvents) to get every later
// event exactly once.
type Event struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	Sequence  int64     `json:"sequence"`
	Timestamp time.Time `json:"timestamp"`
	Data      EventData `json:"data"`
}

// EventData is what an event carries: the conversation after the change,
// and per type the changes (conversation.updated: each changed field with
// its previous value), the participant (participant_added, _removed) or
// the message (message.created).
type EventData struct {
	Conversation Conversation `json:"conversation"`
	// Changes of conversation.updated: "subject" and "status" with their
	// previous values.
	Changes map[string]any `json:"changes,omitempty"`
	// UserID of participant_added and participant_removed.
	UserID string `json:"userId,omitempty"`
	// Message of message.created.
	Message *Message `json:"message,omitempty"`
	// EndpointID of webhook.test: the endpoint tested.
	EndpointID string `json:"endpointId,omitempty"`
}

// FromOldest, as a position, reads from the oldest event the service still
// keeps (events are kept 30 days).
const FromOldest int64 = -1

// EventOptions filters and sizes the feed.
type EventOptions struct {
	// Types keeps only events of these types; empty keeps all.
	Types []string
	// Limit is the page size, 1..1000; 0 means the service's default (100).
	Limit int
}

// EventPage is one page of the feed. Position is where to continue from:
// the highest sequence the service examined for the caller, which may be
// beyond the last event of the page (events the caller may not see or did
// not ask for). Full says a full page came: more are ready now.
type EventPage struct {
	Events   []Event
	Position int64
	Full     bool
}

// ListEventsPage reads the events after the position after (FromOldest:
// from the oldest kept), oldest first (GET /v1/events). A position below
// what the service purged is an *Error with the code CodeCursorExpired:
// resynchronise with ListOptions.UpdatedAfter, then read FromOldest.
func (c *Client) ListEventsPage(ctx context.Context, after int64, opts EventOptions) (EventPage, error) {
	u, err := c.conversationsURL("ListEventsPage", "v1", "events")
	if err != nil {
		return EventPage{}, err
	}
	q := eventQuery(after, opts.Types)
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	u.RawQuery = q.Encode()
	var page EventPage
	h, err := c.call(ctx, request{method: http.MethodGet, url: u}, nil, &page.Events)
	if err != nil {
		return EventPage{}, err
	}
	next, err := nextLink(h.Values("Link"))
	if err != nil || next == "" {
		return EventPage{}, fmt.Errorf("client: GET %s: no position to continue from in the Link header", u.Path)
	}
	nu, err := url.Parse(next)
	if err == nil {
		page.Position, err = strconv.ParseInt(nu.Query().Get("after"), 10, 64)
	}
	if err != nil {
		return EventPage{}, fmt.Errorf("client: GET %s: Link %q names no position", u.Path, next)
	}
	if page.Events == nil {
		page.Events = []Event{}
	}
	limit := opts.Limit
	if limit == 0 {
		limit = 100
	}
	page.Full = len(page.Events) >= limit
	return page, nil
}

func eventQuery(after int64, types []string) url.Values {
	q := url.Values{}
	if after >= 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if len(types) > 0 {
		q.Set("types", strings.Join(types, ","))
	}
	return q
}

// EventFeed is the caller's event feed from a position. Each range over
// All reads the events after Position, oldest first, page after page,
// until it has caught up with the feed, and moves Position on as it goes:
// store it after the loop and give it to Events next time (or range over
// the same feed again later) to get every later event exactly once.
// An EventFeed is for one goroutine at a time.
type EventFeed struct {
	c        *Client
	opts     EventOptions
	position int64
}

// Events returns the feed of the events after the position after (a
// stored position or Sequence, or FromOldest).
//
//	feed := c.Events(stored, client.EventOptions{})
//	for e, err := range feed.All(ctx) {
//		if err != nil {
//			return err
//		}
//		handle(e)
//	}
//	stored = feed.Position()
func (c *Client) Events(after int64, opts EventOptions) *EventFeed {
	return &EventFeed{c: c, opts: opts, position: after}
}

// Position is where the feed continues from: the Sequence of the last event
// the loop received or, once a page is done, the position of its Link
// header, which moves past events the caller may not see or Types left
// out. It is the after given to Events until something was read.
func (f *EventFeed) Position() int64 { return f.position }

// All iterates over the events after Position until the feed has caught
// up: the events ready now, each once. A failure is yielded once and ends
// the iteration.
func (f *EventFeed) All(ctx context.Context) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			before := f.position
			page, err := f.c.ListEventsPage(ctx, f.position, f.opts)
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, e := range page.Events {
				f.position = e.Sequence
				if !yield(e, nil) {
					return
				}
			}
			f.position = max(f.position, page.Position)
			if !page.Full || page.Position <= before {
				return
			}
		}
	}
}

// StreamOptions tunes FollowEvents.
type StreamOptions struct {
	// Types keeps only events of these types; empty keeps all.
	Types []string
	// MaxReconnectWait bounds the wait before reconnecting (the service's
	// retry: hint, or a backoff after a failure); 0 means 30 s.
	MaxReconnectWait time.Duration
}

// FollowEvents follows the live stream of events (GET /v1/events/stream,
// Server-Sent Events) from the position after (a stored Sequence, or
// FromOldest) until ctx ends or the loop is left: first the events that
// exist, then each new one as it happens. When the stream ends (the token
// expired, the replica stopped, the network failed) it reconnects with
// Last-Event-ID and a fresh token, so no event is skipped or repeated. A
// connection refused with 401 invalid_token (a token the service deems
// expired or revoked) renews the session once and connects again; refused
// again, it is yielded as ErrInvalidToken. An error that reconnecting
// cannot fix (a position below the purge: CodeCursorExpired; a refused
// scope) is yielded once and ends it; so does the end of ctx.
func (c *Client) FollowEvents(ctx context.Context, after int64, opts StreamOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		maxWait := opts.MaxReconnectWait
		if maxWait <= 0 {
			maxWait = 30 * time.Second
		}
		wait := time.Duration(0)
		failures := 0
		renewed := false
		for {
			if wait > 0 {
				t := time.NewTimer(min(wait, maxWait))
				select {
				case <-ctx.Done():
					t.Stop()
					yield(Event{}, ctx.Err())
					return
				case <-t.C:
				}
			}
			s, err := c.openStream(ctx, after, opts.Types)
			if err != nil {
				var e *Error
				switch {
				case ctx.Err() != nil:
					yield(Event{}, ctx.Err())
					return
				case errors.As(err, &e) && e.Status == http.StatusUnauthorized && e.Code == CodeInvalidToken && !renewed:
					renewed = true // a fresh token, once
					c.invalidate(s.gen)
					wait = 0
					continue
				case errors.As(err, &e) && (e.Status == http.StatusTooManyRequests || e.Status >= 500):
					wait = max(e.RetryAfter, firstRetryWait<<min(failures, 7))
					failures++
					continue
				case errors.As(err, &e):
					yield(Event{}, err)
					return
				default: // no answer: the network, a replica gone
					wait = firstRetryWait << min(failures, 7)
					failures++
					continue
				}
			}
			renewed, failures = false, 0
			retry, err := s.read(func(e Event) bool {
				after = e.Sequence
				return yield(e, nil)
			})
			s.body.Close()
			if err == errStopped {
				return
			}
			if ctx.Err() != nil {
				yield(Event{}, ctx.Err())
				return
			}
			wait = retry
		}
	}
}

var errStopped = errors.New("the loop was left")

// eventStream is one open stream response.
type eventStream struct {
	body io.ReadCloser
	gen  uint64 // the token generation it was opened with
}

func (c *Client) openStream(ctx context.Context, after int64, types []string) (eventStream, error) {
	u, err := c.conversationsURL("FollowEvents", "v1", "events", "stream")
	if err != nil {
		return eventStream{}, err
	}
	u.RawQuery = eventQuery(after, types).Encode()
	bearer, gen, err := c.bearer(ctx)
	if err != nil {
		return eventStream{gen: gen}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return eventStream{gen: gen}, fmt.Errorf("client: GET %s: %w", u.Path, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Authorization", "Bearer "+bearer)
	if after >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	// The configured client's timeout would cut the stream: the same
	// transport without it.
	hc := *c.http
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return eventStream{gen: gen}, fmt.Errorf("client: GET %s: %w", u.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
		return eventStream{gen: gen}, newError(request{method: http.MethodGet, url: u}, resp, data, c.now())
	}
	return eventStream{body: resp.Body, gen: gen}, nil
}

// maxEventLine bounds one line of the stream (an event's data): far above
// any event (a message is at most 10,000 characters and 16 KiB of
// metadata).
const maxEventLine = 1 << 20

// read parses the stream, calling handle with each event, until it ends;
// it returns the reconnection delay the stream asked for, or errStopped
// when handle said to stop.
func (s eventStream) read(handle func(Event) bool) (time.Duration, error) {
	sc := bufio.NewScanner(s.body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	retry := time.Second
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if data.Len() > 0 {
				var e Event
				if err := json.Unmarshal([]byte(data.String()), &e); err == nil {
					if !handle(e) {
						return 0, errStopped
					}
				}
				data.Reset()
			}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		case "retry":
			if ms, err := strconv.Atoi(value); err == nil && ms >= 0 {
				retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return retry, nil
}
