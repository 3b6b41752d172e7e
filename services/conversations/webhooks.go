package conversations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acme/platform/pkg/validation"
)

// Webhooks (contract section 11.3): endpoints of an account that receive
// its events by HTTP POST, signed per Standard Webhooks v1, and the
// deliveries log, one record per (endpoint, event).

// Webhook errors; the HTTP layer maps them.
var (
	// ErrEndpointNotFound: no such endpoint in the caller's account.
	ErrEndpointNotFound = fmt.Errorf("webhook endpoint %w", ErrNotFound)
	// ErrDeliveryNotFound: no such delivery of the endpoint.
	ErrDeliveryNotFound = fmt.Errorf("webhook delivery %w", ErrNotFound)
	// ErrTooManyEndpoints: the account holds the largest number of
	// endpoints already.
	ErrTooManyEndpoints = errors.New("too many webhook endpoints")
)

// RateLimitedError: a test or retry of an endpoint beyond its budget.
type RateLimitedError struct {
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("too many test or retry requests for this endpoint; retry after %s", e.RetryAfter)
}

// The event types an endpoint may subscribe to (contract section 11.1),
// and "*" for all of them. webhook.test is sent on request only.
const (
	EventTypeAll         = "*"
	EventTypeWebhookTest = "webhook.test"
)

// SubscribableEventTypes are the event types of section 11.1.
func SubscribableEventTypes() []string {
	out := make([]string, len(EventTypes))
	for i, t := range EventTypes {
		out[i] = string(t)
	}
	return out
}

// Limits of webhook endpoints.
const (
	MaxWebhookURLLen         = 2048
	MaxWebhookDescriptionLen = 500
	// MaxRotationOverlap bounds the overlap a rotation may ask for.
	MaxRotationOverlap = 7 * 24 * time.Hour
	// DefaultRotationOverlap is the overlap when the request names none.
	DefaultRotationOverlap = 24 * time.Hour
)

// WebhookEndpoint is one receiver of an account's events.
type WebhookEndpoint struct {
	ID          string   `json:"id"`
	AccountID   string   `json:"-"`
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Description string   `json:"description"`
	Enabled     bool     `json:"enabled"`
	// DisabledReason says why the service disabled the endpoint; nil
	// while it is enabled or when a caller disabled it.
	DisabledReason *string   `json:"disabledReason"`
	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`

	// Secrets sign deliveries: the newest first, an older one only until
	// its NotAfter. Each is sealed (SecretBox); never returned.
	Secrets []SealedSecret `json:"-"`
	// EventCursor is the sequence of the account's event log up to which
	// deliveries of this endpoint have been recorded.
	EventCursor int64 `json:"-"`
	// FailingSince is the first failed attempt after the last success;
	// nil when the last attempt succeeded.
	FailingSince *time.Time `json:"-"`
	// Version counts the changes of the stored document (compare-and-set).
	Version int64 `json:"-"`
}

// SealedSecret is one signing secret, encrypted at rest.
type SealedSecret struct {
	Sealed []byte
	// NotAfter ends a previous secret's overlap; nil for the current one.
	NotAfter *time.Time
}

// MarshalJSON writes times with millisecond precision, like every
// resource, and events and disabledReason as the contract shapes them.
func (e WebhookEndpoint) MarshalJSON() ([]byte, error) {
	type plain WebhookEndpoint
	return json.Marshal(struct {
		plain
		CreatedAt string `json:"createdAt"`
		UpdatedAt string `json:"updatedAt"`
	}{plain(e), FormatTime(e.CreatedAt), FormatTime(e.UpdatedAt)})
}

// Subscribed reports whether the endpoint receives events of type t.
func (e WebhookEndpoint) Subscribed(t string) bool {
	return t == EventTypeWebhookTest || slices.Contains(e.Events, EventTypeAll) || slices.Contains(e.Events, t)
}

// activeSecrets are the sealed secrets that sign at now, newest first.
func (e WebhookEndpoint) activeSecrets(now time.Time) []SealedSecret {
	var out []SealedSecret
	for _, s := range e.Secrets {
		if s.NotAfter == nil || now.Before(*s.NotAfter) {
			out = append(out, s)
		}
	}
	return out
}

// NewWebhookEndpoint is the body of POST /v1/webhooks.
type NewWebhookEndpoint struct {
	URL         *string   `json:"url"`
	Events      *[]string `json:"events"`
	Description *string   `json:"description"`
	Enabled     *bool     `json:"enabled"`
}

// WebhookPatch is a merge patch of an endpoint (RFC 7396): a field given
// is set; absent ones stay. None of them may be null.
type WebhookPatch struct {
	URL         *string
	Events      *[]string
	Description *string
	Enabled     *bool
}

// WebhookURLPolicy is what an endpoint URL may be.
type WebhookURLPolicy struct {
	// AllowHTTP accepts plain http URLs (development); https always.
	AllowHTTP bool
	// Dialable is the delivery dialler's check of an address (nil: none
	// is refused here). A URL whose host is an address it refuses could
	// never be delivered to.
	Dialable func(netip.Addr) error
}

// CheckURL validates an endpoint URL: absolute, https (or http when
// allowed), a host, no credentials, no fragment, at most
// MaxWebhookURLLen bytes, and a host that is not an address Dialable
// refuses. A host name's addresses are judged when dialling (they may
// change after this check).
func (p WebhookURLPolicy) CheckURL(raw string) string {
	if raw == "" {
		return "is required"
	}
	if len(raw) > MaxWebhookURLLen {
		return fmt.Sprintf("must be at most %d bytes", MaxWebhookURLLen)
	}
	if !utf8.ValidString(raw) || strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "must be a URL without spaces or control characters"
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" {
		return "must be an absolute https URL"
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !p.AllowHTTP {
			return "must use https"
		}
	default:
		if p.AllowHTTP {
			return "must use https or http"
		}
		return "must use https"
	}
	if u.User != nil {
		return "must not carry credentials (user:password@): authenticate deliveries by their signature"
	}
	if u.Hostname() == "" {
		return "must name a host"
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return "must not have a fragment"
	}
	if addr, err := netip.ParseAddr(u.Hostname()); err == nil && p.Dialable != nil && p.Dialable(addr) != nil {
		return fmt.Sprintf("must not name %s, an address deliveries are never sent to (not globally reachable, and not in a range the operator allowed)", addr)
	}
	if port := u.Port(); port != "" {
		n := 0
		for _, c := range port {
			n = n*10 + int(c-'0')
			if n > 65535 {
				break
			}
		}
		if n < 1 || n > 65535 {
			return "must have a port from 1 to 65535"
		}
	}
	return ""
}

// checkEvents validates a subscription: a non-empty list of known types
// without repeats, or ["*"].
func checkEvents(events []string) string {
	if len(events) == 0 {
		return `must name at least one event type, or be ["*"]`
	}
	if slices.Contains(events, EventTypeAll) && len(events) > 1 {
		return `must be ["*"] alone or a list of event types`
	}
	for i, t := range events {
		if t != EventTypeAll && !slices.Contains(SubscribableEventTypes(), t) {
			return fmt.Sprintf("names an unknown event type %q (known: %s)", t, strings.Join(SubscribableEventTypes(), ", "))
		}
		if slices.Contains(events[:i], t) {
			return fmt.Sprintf("names %q twice", t)
		}
	}
	return ""
}

func checkDescription(d string) string {
	if !utf8.ValidString(d) || utf8.RuneCountInString(d) > MaxWebhookDescriptionLen {
		return fmt.Sprintf("must be at most %d characters", MaxWebhookDescriptionLen)
	}
	return ""
}

// Endpoint validates the body and returns the endpoint it describes
// (id, secret and times are the service's).
func (in NewWebhookEndpoint) Endpoint(p WebhookURLPolicy) (WebhookEndpoint, error) {
	var v validation.Collector
	e := WebhookEndpoint{Events: []string{EventTypeAll}, Enabled: true}
	if in.URL == nil {
		v.Add("url", "is required")
	} else if reason := p.CheckURL(*in.URL); reason != "" {
		v.Add("url", reason)
	} else {
		e.URL = *in.URL
	}
	if in.Events != nil {
		if reason := checkEvents(*in.Events); reason != "" {
			v.Add("events", reason)
		} else {
			e.Events = slices.Clone(*in.Events)
		}
	}
	if in.Description != nil {
		if reason := checkDescription(*in.Description); reason != "" {
			v.Add("description", reason)
		} else {
			e.Description = *in.Description
		}
	}
	if in.Enabled != nil {
		e.Enabled = *in.Enabled
	}
	return e, v.Err()
}

// ParseWebhookPatch reads a merge patch's members: url, events,
// description and enabled; null is refused for each (none is optional in
// the resource), unknown members are ignored like in every body.
func ParseWebhookPatch(members map[string]json.RawMessage, p WebhookURLPolicy) (WebhookPatch, error) {
	var v validation.Collector
	var patch WebhookPatch
	for name, raw := range members {
		if string(raw) == "null" {
			switch name {
			case "url", "events", "description", "enabled":
				v.Add(name, "must not be null")
			}
			continue
		}
		switch name {
		case "url":
			var s string
			if json.Unmarshal(raw, &s) != nil {
				v.Add(name, "must be a string")
			} else if reason := p.CheckURL(s); reason != "" {
				v.Add(name, reason)
			} else {
				patch.URL = &s
			}
		case "events":
			var list []string
			if json.Unmarshal(raw, &list) != nil {
				v.Add(name, "must be an array of strings")
			} else if reason := checkEvents(list); reason != "" {
				v.Add(name, reason)
			} else {
				patch.Events = &list
			}
		case "description":
			var s string
			if json.Unmarshal(raw, &s) != nil {
				v.Add(name, "must be a string")
			} else if reason := checkDescription(s); reason != "" {
				v.Add(name, reason)
			} else {
				patch.Description = &s
			}
		case "enabled":
			var b bool
			if json.Unmarshal(raw, &b) != nil {
				v.Add(name, "must be a boolean")
			} else {
				patch.Enabled = &b
			}
		}
	}
	return patch, v.Err()
}

// DeliveryState is where a delivery stands.
type DeliveryState string

// The states of a delivery.
const (
	DeliveryPending   DeliveryState = "pending"
	DeliverySucceeded DeliveryState = "succeeded"
	DeliveryFailed    DeliveryState = "failed"
)

// WebhookDelivery is one event to one endpoint, with the outcome of its
// last attempt.
type WebhookDelivery struct {
	ID         string `json:"id"`
	AccountID  string `json:"-"`
	EndpointID string `json:"-"`
	EventID    string `json:"eventId"`
	EventType  string `json:"eventType"`
	// EventTime is when the change happened (delivery latency).
	EventTime time.Time `json:"-"`
	// Payload is the body every attempt sends.
	Payload  []byte        `json:"-"`
	State    DeliveryState `json:"state"`
	Attempts int           `json:"attempts"`
	// Of the last attempt:
	ResponseStatus *int    `json:"responseStatus"`
	DurationMs     *int64  `json:"durationMs"`
	Error          *string `json:"error"`
	// NextAttemptAt is when it is due (pending), or until when the replica
	// that claimed it holds it; nil once it ended.
	NextAttemptAt *time.Time `json:"nextAttemptAt"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	// Claim is the token of the replica attempting it ("" when none).
	Claim string `json:"-"`
	// Trace is the traceparent of the request that made the change: each
	// attempt's span continues that trace.
	Trace string `json:"-"`
}

// MarshalJSON writes times with millisecond precision.
func (d WebhookDelivery) MarshalJSON() ([]byte, error) {
	type plain WebhookDelivery
	var next *string
	if d.NextAttemptAt != nil && d.State == DeliveryPending {
		s := FormatTime(*d.NextAttemptAt)
		next = &s
	}
	return json.Marshal(struct {
		plain
		NextAttemptAt *string `json:"nextAttemptAt"`
		CreatedAt     string  `json:"createdAt"`
		UpdatedAt     string  `json:"updatedAt"`
	}{plain(d), next, FormatTime(d.CreatedAt), FormatTime(d.UpdatedAt)})
}

// WebhookEvent is an event as a webhook delivers it.
type WebhookEvent struct {
	ID       string
	Type     string
	Sequence int64
	Time     time.Time
	// Payload is the event's JSON, as the feed serves it: id, type,
	// sequence, timestamp, data.
	Payload []byte
	// Trace is the traceparent of the request that made the change.
	Trace string
}

// EventLog is the account's event log as webhooks read it (section 11.1).
type EventLog interface {
	// EventsAfter returns up to limit events of accountID with a sequence
	// greater than after, oldest first.
	EventsAfter(ctx context.Context, accountID string, after int64, limit int) ([]WebhookEvent, error)
	// LatestSequence is the sequence of the account's newest event (0
	// when it has none).
	LatestSequence(ctx context.Context, accountID string) (int64, error)
}

// WebhookPage is one page of endpoints; Next is set when more follow.
type WebhookPage struct {
	Endpoints []WebhookEndpoint
	Next      *Position
}

// DeliveryPage is one page of deliveries; Next is set when more follow.
type DeliveryPage struct {
	Deliveries []WebhookDelivery
	Next       *Position
}

// AttemptOutcome is what the store records after an attempt: the
// delivery's new state and the outcome of the attempt.
type AttemptOutcome struct {
	State          DeliveryState
	ResponseStatus *int
	DurationMs     int64
	Error          *string
	NextAttemptAt  *time.Time
	At             time.Time
}

// AttemptRecord is what the store records of one attempt: the outcome of
// a delivery that had Attempts attempts before and that Claim holds.
type AttemptRecord struct {
	ID       string
	Claim    string
	Attempts int
	Outcome  AttemptOutcome
}

// WebhookStore persists endpoints and deliveries. It decides no rule.
type WebhookStore interface {
	InsertEndpoint(ctx context.Context, e WebhookEndpoint) error
	CountEndpoints(ctx context.Context, accountID string) (int, error)
	FindEndpoint(ctx context.Context, accountID, id string) (WebhookEndpoint, error)
	// FindEndpointsByID reads endpoints of any account (the delivery
	// engine, which works for every account); ids not found are left out.
	FindEndpointsByID(ctx context.Context, ids []string) ([]WebhookEndpoint, error)
	ListEndpoints(ctx context.Context, accountID string, limit int, after *Position) (WebhookPage, error)
	// SaveEndpoint stores e if the stored one is still at fromVersion.
	SaveEndpoint(ctx context.Context, e WebhookEndpoint, fromVersion int64) (bool, error)
	DeleteEndpoint(ctx context.Context, accountID, id string) (bool, error)
	// TakeQuota counts one request of kind against the endpoint's budget
	// of limit per window; it returns how long to wait when none is left.
	TakeQuota(ctx context.Context, endpointID, kind string, now time.Time, window time.Duration, limit int) (time.Duration, error)

	// InsertDeliveries stores deliveries, skipping any whose (endpoint,
	// event) is stored already.
	InsertDeliveries(ctx context.Context, ds []WebhookDelivery) error
	ListDeliveries(ctx context.Context, accountID, endpointID string, limit int, after *Position) (DeliveryPage, error)
	// RequeueDelivery sets a delivery back to pending, due at now, and
	// drops any claim on it.
	RequeueDelivery(ctx context.Context, accountID, endpointID, id string, now time.Time) (bool, error)
	// DueDeliveries lists up to limit pending deliveries due at or
	// before now, due longest ago first, of endpoints not in busy.
	DueDeliveries(ctx context.Context, now time.Time, busy []string, limit int) ([]WebhookDelivery, error)
	// ClaimDeliveries claims each of ds that is still pending, due at or
	// before now and at its attempt count: it stays with claim until
	// leaseUntil. It returns the ids it claimed.
	ClaimDeliveries(ctx context.Context, ds []WebhookDelivery, now, leaseUntil time.Time, claim string) ([]string, error)
	// FinishAttempts records attempts' outcomes, each only while its
	// claim still holds its delivery; it reports which it recorded.
	FinishAttempts(ctx context.Context, rs []AttemptRecord) ([]bool, error)
	// OldestPending is the due time of the pending delivery due longest
	// ago (nil: none pending).
	OldestPending(ctx context.Context) (*time.Time, error)
	// DeleteFinishedDeliveries deletes the succeeded and failed
	// deliveries last changed before t, never a pending one.
	DeleteFinishedDeliveries(ctx context.Context, before time.Time) (int64, error)
	// DeleteQuotas deletes the test and retry budgets whose window
	// started before t.
	DeleteQuotas(ctx context.Context, before time.Time) (int64, error)

	// ClaimFanout claims the enabled endpoint whose events were looked at
	// longest ago (not after now) until leaseUntil.
	ClaimFanout(ctx context.Context, now, leaseUntil time.Time, claim string) (WebhookEndpoint, bool, error)
	// ReleaseFanout stores the endpoint's new cursor and when it is looked
	// at next, only while claim holds it.
	ReleaseFanout(ctx context.Context, id, claim string, cursor int64, next time.Time) (bool, error)
	// MarkEndpointFailing sets failing_since to at unless it is set and
	// returns the endpoint after; MarkEndpointHealthy clears it.
	MarkEndpointFailing(ctx context.Context, id string, at time.Time) (WebhookEndpoint, error)
	MarkEndpointHealthy(ctx context.Context, id string) error
	// DisableEndpoint disables an enabled endpoint with reason.
	DisableEndpoint(ctx context.Context, id, reason string, at time.Time) (bool, error)
}

// NewWebhookEndpointID and NewDeliveryID return fresh ids.
func NewWebhookEndpointID() string { return newID("whk_") }

// NewDeliveryID: see NewWebhookEndpointID.
func NewDeliveryID() string { return newID("dlv_") }

// NewTestEventID is the id of a webhook.test event.
func NewTestEventID() string { return newID("evt_") }

// ValidWebhookEndpointID reports whether id has the form of an endpoint id.
func ValidWebhookEndpointID(id string) bool { return validation.IsRandomID(id, "whk_") }

// ValidDeliveryID reports whether id has the form of a delivery id.
func ValidDeliveryID(id string) bool { return validation.IsRandomID(id, "dlv_") }
