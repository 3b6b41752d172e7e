package http

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/conversations"
)

// The feed and the live stream of events.

// eventParams are the validated parameters of GET /v1/events and
// /v1/events/stream.
type eventParams struct {
	after *int64
	types []conversations.EventType
	limit int
}

// parseEventParams checks after, types and (for the feed) limit strictly:
// each at most once; after a non-negative integer; types a comma-separated
// list of the contract's types; limit an integer in 1..maxLimit. A
// Last-Event-ID header (the stream's) must be a sequence, and wins over
// after.
func parseEventParams(q url.Values, lastEventID []string, withLimit bool) (eventParams, error) {
	p := eventParams{limit: conversations.DefaultEventPageSize}
	var invalid validation.Collector
	query := web.Query{Values: q, Invalid: &invalid}
	sequence := func(field, v string) *int64 {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || strings.HasPrefix(v, "+") {
			invalid.Add(field, "must be an event sequence: an integer of at least 0")
			return nil
		}
		return &n
	}
	if v, ok := query.Single("after"); ok {
		p.after = sequence("after", v)
	}
	if v, ok := query.Single("types"); ok {
		for t := range strings.SplitSeq(v, ",") {
			et := conversations.EventType(strings.TrimSpace(t))
			if !et.Valid() {
				invalid.Add("types", "must be a comma-separated list of event types: "+typeList())
				break
			}
			p.types = append(p.types, et)
		}
	}
	if withLimit {
		p.limit = query.Limit(p.limit, conversations.MaxEventPageSize)
	}
	switch len(lastEventID) {
	case 0:
	case 1:
		if s := sequence("Last-Event-ID", lastEventID[0]); s != nil {
			p.after = s
		}
	default:
		invalid.Add("Last-Event-ID", "must be given at most once")
	}
	if err := invalid.Err(); err != nil {
		return eventParams{}, err
	}
	return p, nil
}

func typeList() string {
	names := make([]string, len(conversations.EventTypes))
	for i, t := range conversations.EventTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// eventsLink is the position to continue from, with the request's filters.
func eventsLink(path string, p eventParams, next int64, withLimit bool) string {
	params := url.Values{}
	params.Set("after", strconv.FormatInt(next, 10))
	if withLimit {
		params.Set("limit", strconv.Itoa(p.limit))
	}
	if len(p.types) > 0 {
		names := make([]string, len(p.types))
		for i, t := range p.types {
			names[i] = string(t)
		}
		params.Set("types", strings.Join(names, ","))
	}
	return `<` + path + `?` + params.Encode() + `>; rel="next"`
}

// handleEvents serves GET /v1/events: one page of the caller's feed, and
// on every page, empty or not, the Link to continue from.
func handleEvents(svc *conversations.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		p, err := parseEventParams(c.Request().URL.Query(), nil, true)
		if err != nil {
			return err
		}
		page, err := svc.ListEvents(c.Request().Context(), conversations.EventQuery{
			Caller: caller(c), After: p.after, Types: p.types, Limit: p.limit,
		})
		if err != nil {
			return err
		}
		c.Response().Header().Set("Link", eventsLink("/v1/events", p, page.Next, true))
		// The events' data is written as the log holds it (Event.AppendJSON).
		body := append(make([]byte, 0, 512*len(page.Events)+2), '[')
		for i, e := range page.Events {
			if i > 0 {
				body = append(body, ',')
			}
			if body, err = e.AppendJSON(body); err != nil {
				return fmt.Errorf("encode event %s: %w", e.ID, err)
			}
		}
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, append(body, ']'))
	}
}

// StreamConfig tunes the live streams.
type StreamConfig struct {
	// KeepAlive is the longest silence of a stream: a comment line is
	// written when nothing else was (at most 15 s, as the OpenAPI document says).
	KeepAlive time.Duration
	// MaxDuration, when set, ends every stream after it (the client
	// reconnects), besides the end at the token's expiry.
	MaxDuration time.Duration
	// Retry is the reconnection delay a stream that ends announces.
	Retry time.Duration
}

// handleStream serves GET /v1/events/stream: Server-Sent Events from the
// position of Last-Event-ID (or after), fed by the replica's Hub. A
// position below the purge is refused before the stream starts. The
// stream ends when the bearer token expires, when the Hub closes
// (SIGTERM) or drops it as slow, and when the client goes; every end the
// server chooses announces retry:.
func handleStream(svc *conversations.Service, hub *conversations.Hub, cfg StreamConfig) echo.HandlerFunc {
	return func(c *echo.Context) error {
		r := c.Request()
		p, err := parseEventParams(r.URL.Query(), r.Header.Values("Last-Event-ID"), false)
		if err != nil {
			return err
		}
		// A token past its expiry opens no stream, leeway or not: the
		// stream would end at once, and a client reconnecting with the
		// same token would loop; a 401 tells it to renew.
		var expiry time.Time
		if claims, ok := token.ClaimsFromContext(r.Context()); ok {
			expiry = claims.Expiry
		}
		if !expiry.IsZero() && !time.Now().Before(expiry) {
			return &token.BearerError{Reason: "token expired"}
		}
		who := caller(c)
		after, err := svc.EventFloor(r.Context(), who.AccountID, p.after)
		if err != nil {
			return err
		}
		sub, err := hub.Subscribe(who, p.types, after)
		if err != nil {
			return err
		}
		defer hub.Unsubscribe(sub)
		// The stream waits for events, not for the database: it must not
		// hold a slot of the replica's in-flight bound, and it lives past
		// the request's database budget.
		web.LeaveInFlight(r.Context())
		streamCtx := web.WithoutBudget(r.Context())

		h := c.Response().Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no") // proxies must not buffer a stream
		c.Response().WriteHeader(http.StatusOK)
		rc := http.NewResponseController(c.Response())
		write := func(b []byte) error {
			// Each write gets its own deadline: the server's write timeout
			// would otherwise cut every stream after 30 s.
			_ = rc.SetWriteDeadline(time.Now().Add(cfg.KeepAlive + 10*time.Second))
			if _, err := c.Response().Write(b); err != nil {
				return err
			}
			return rc.Flush()
		}
		retry := fmt.Appendf(nil, "retry: %d\n\n", cfg.Retry.Milliseconds())
		if err := write([]byte(": stream of events\n\n")); err != nil {
			return nil
		}

		end := time.Duration(1<<63 - 1)
		if !expiry.IsZero() {
			end = time.Until(expiry)
		}
		if cfg.MaxDuration > 0 {
			end = min(end, cfg.MaxDuration)
		}
		expired := time.NewTimer(end)
		defer expired.Stop()
		keepAlive := time.NewTicker(cfg.KeepAlive)
		defer keepAlive.Stop()
		var buf []byte
		for {
			select {
			case <-streamCtx.Done():
				return nil
			case <-expired.C:
				_ = write(retry)
				return nil
			case <-keepAlive.C:
				if write([]byte(": keep-alive\n\n")) != nil {
					return nil
				}
			case batch, ok := <-sub.Events:
				if !ok {
					// Closed by the hub: the replica stops, or this reader
					// was too slow; either way the client reconnects.
					_ = write(retry)
					return nil
				}
				buf = buf[:0]
				for _, e := range batch {
					buf = fmt.Appendf(buf, "id: %d\nevent: %s\ndata: ", e.Sequence, e.Type)
					if buf, err = e.AppendJSON(buf); err != nil {
						return fmt.Errorf("encode event %s: %w", e.ID, err)
					}
					buf = append(buf, "\n\n"...)
				}
				err := write(buf)
				hub.Sent(sub, batch)
				if err != nil {
					return nil
				}
				keepAlive.Reset(cfg.KeepAlive)
			}
		}
	}
}
