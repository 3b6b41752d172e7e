// Package webhook is the webhooks of the conversations service: endpoints
// of an account that receive its events by HTTP POST, signed per Standard
// Webhooks v1, and the deliveries log, one record per (endpoint, event).
// It holds the rules (Service), the types, the store's interface and the
// secrets; package delivery below it makes the HTTP requests, mongostore
// implements Store, and nothing here knows HTTP or MongoDB.
package webhook

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
	"github.com/acme/platform/services/conversations"
)

// Webhook errors; the HTTP layer maps them.
var (
	// ErrEndpointNotFound: no such endpoint in the caller's account.
	ErrEndpointNotFound = fmt.Errorf("webhook endpoint %w", conversations.ErrNotFound)
	// ErrDeliveryNotFound: no such delivery of the endpoint.
	ErrDeliveryNotFound = fmt.Errorf("webhook delivery %w", conversations.ErrNotFound)
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

// The event types an endpoint may subscribe to,
// and "*" for all of them. webhook.test is sent on request only.
const (
	EventTypeAll  = "*"
	EventTypeTest = "webhook.test"
)

// SubscribableEventTypes are the event types an endpoint may subscribe to (every
// type of the event log, as the OpenAPI document lists them).
func SubscribableEventTypes() []string {
	out := make([]string, len(conversations.EventTypes))
	for i, t := range conversations.EventTypes {
		out[i] = string(t)
	}
	return out
}

// Limits of webhook endpoints.
const (
	MaxURLLen         = 2048
	MaxDescriptionLen = 500
	// MaxRotationOverlap bounds the overlap a rotation may ask for.
	MaxRotationOverlap = 7 * 24 * time.Hour
	// DefaultRotationOverlap is the overlap when the request names none.
	DefaultRotationOverlap = 24 * time.Hour
)

// Endpoint is one receiver of an account's events.
type Endpoint struct {
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
func (e Endpoint) MarshalJSON() ([]byte, error) {
	type plain Endpoint
	return json.Marshal(struct {
		plain
		CreatedAt string `json:"createdAt"`
		UpdatedAt string `json:"updatedAt"`
	}{plain(e), conversations.FormatTime(e.CreatedAt), conversations.FormatTime(e.UpdatedAt)})
}

// Subscribed reports whether the endpoint receives events of type t.
func (e Endpoint) Subscribed(t string) bool {
	return t == EventTypeTest || slices.Contains(e.Events, EventTypeAll) || slices.Contains(e.Events, t)
}

// activeSecrets are the sealed secrets that sign at now, newest first.
func (e Endpoint) activeSecrets(now time.Time) []SealedSecret {
	var out []SealedSecret
	for _, s := range e.Secrets {
		if s.NotAfter == nil || now.Before(*s.NotAfter) {
			out = append(out, s)
		}
	}
	return out
}

// NewEndpoint is the body of POST /v1/webhooks.
type NewEndpoint struct {
	URL         *string   `json:"url"`
	Events      *[]string `json:"events"`
	Description *string   `json:"description"`
	Enabled     *bool     `json:"enabled"`
}

// Rotation is the optional body of a secret's rotation: how long the
// current secret keeps signing beside the new one, in seconds (nil:
// DefaultRotationOverlap; 0: it stops at once).
type Rotation struct {
	Overlap *int64 `json:"overlap"`
}

// overlap validates the rotation and returns its overlap: from 0 to
// MaxRotationOverlap.
func (r Rotation) overlap() (time.Duration, error) {
	if r.Overlap == nil {
		return DefaultRotationOverlap, nil
	}
	longest := int64(MaxRotationOverlap / time.Second)
	if *r.Overlap < 0 || *r.Overlap > longest {
		return 0, validation.Invalid("overlap", fmt.Sprintf("must be a number of seconds from 0 to %d", longest))
	}
	return time.Duration(*r.Overlap) * time.Second, nil
}

// Patch is a merge patch of an endpoint (RFC 7396): a field given
// is set; absent ones stay. None of them may be null.
type Patch struct {
	URL         *string
	Events      *[]string
	Description *string
	Enabled     *bool
}

// URLPolicy is what an endpoint URL may be.
type URLPolicy struct {
	// AllowHTTP accepts plain http URLs (development); https always.
	AllowHTTP bool
	// Dialable is the delivery dialler's check of an address (nil: none
	// is refused here). A URL whose host is an address it refuses could
	// never be delivered to.
	Dialable func(netip.Addr) error
}

// CheckURL validates an endpoint URL: absolute, https (or http when
// allowed), a host, no credentials, no fragment, at most
// MaxURLLen bytes, and a host that is not an address Dialable
// refuses. A host name's addresses are judged when dialling (they may
// change after this check).
func (p URLPolicy) CheckURL(raw string) string {
	if raw == "" {
		return "is required"
	}
	if len(raw) > MaxURLLen {
		return fmt.Sprintf("must be at most %d bytes", MaxURLLen)
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
	if !utf8.ValidString(d) || utf8.RuneCountInString(d) > MaxDescriptionLen {
		return fmt.Sprintf("must be at most %d characters", MaxDescriptionLen)
	}
	return ""
}

// Endpoint validates the body and returns the endpoint it describes
// (id, secret and times are the service's).
func (in NewEndpoint) Endpoint(p URLPolicy) (Endpoint, error) {
	var v validation.Collector
	e := Endpoint{Events: []string{EventTypeAll}, Enabled: true}
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

// ParsePatch reads a merge patch's members: url, events,
// description and enabled; null is refused for each (none is optional in
// the resource), unknown members are ignored like in every body.
func ParsePatch(members map[string]json.RawMessage, p URLPolicy) (Patch, error) {
	var v validation.Collector
	var patch Patch
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

// Delivery is one event to one endpoint, with the outcome of its
// last attempt.
type Delivery struct {
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
func (d Delivery) MarshalJSON() ([]byte, error) {
	type plain Delivery
	var next *string
	if d.NextAttemptAt != nil && d.State == DeliveryPending {
		s := conversations.FormatTime(*d.NextAttemptAt)
		next = &s
	}
	return json.Marshal(struct {
		plain
		NextAttemptAt *string `json:"nextAttemptAt"`
		CreatedAt     string  `json:"createdAt"`
		UpdatedAt     string  `json:"updatedAt"`
	}{plain(d), next, conversations.FormatTime(d.CreatedAt), conversations.FormatTime(d.UpdatedAt)})
}

// EventLog is the account's event log as webhooks read it (section
// 11.1): every event of the account after a sequence, in the order the
// relay numbered them. A conversations.EventStore is one.
type EventLog interface {
	ListEvents(ctx context.Context, r conversations.EventRange) ([]conversations.Event, error)
	// NewestSequence is the sequence of the account's newest event (0
	// when it has none).
	NewestSequence(ctx context.Context, accountID string) (int64, error)
}

// EndpointPage is one page of endpoints; Next is set when more follow.
type EndpointPage struct {
	Endpoints []Endpoint
	Next      *conversations.Position
}

// DeliveryPage is one page of deliveries; Next is set when more follow.
type DeliveryPage struct {
	Deliveries []Delivery
	Next       *conversations.Position
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
	AccountID string
	ID        string
	Claim     string
	Attempts  int
	Outcome   AttemptOutcome
}

// EndpointRef names one endpoint of one account.
type EndpointRef struct {
	AccountID string
	ID        string
}

// Store persists endpoints and deliveries. It decides no rule. Every
// call names the account it reads or writes, except the sweeps that find
// the engine's work among every account (ClaimFanout, DueDeliveries,
// OldestPending) and the purges (DeleteFinishedDeliveries, DeleteQuotas);
// what they return carries its account, and each write that follows
// names it.
type Store interface {
	InsertEndpoint(ctx context.Context, e Endpoint) error
	CountEndpoints(ctx context.Context, accountID string) (int, error)
	FindEndpoint(ctx context.Context, accountID, id string) (Endpoint, error)
	// FindEndpoints reads the endpoints refs name, each in its account;
	// those not found are left out.
	FindEndpoints(ctx context.Context, refs []EndpointRef) ([]Endpoint, error)
	ListEndpoints(ctx context.Context, accountID string, limit int, after *conversations.Position) (EndpointPage, error)
	// SaveEndpoint stores e if the stored one is still at fromVersion.
	SaveEndpoint(ctx context.Context, e Endpoint, fromVersion int64) (bool, error)
	DeleteEndpoint(ctx context.Context, accountID, id string) (bool, error)
	// TakeQuota counts one request of kind against the endpoint's budget
	// of limit per window; it returns how long to wait when none is left.
	TakeQuota(ctx context.Context, accountID, endpointID, kind string, now time.Time, window time.Duration, limit int) (time.Duration, error)

	// InsertDeliveries stores deliveries, skipping any whose (endpoint,
	// event) is stored already.
	InsertDeliveries(ctx context.Context, ds []Delivery) error
	ListDeliveries(ctx context.Context, accountID, endpointID string, limit int, after *conversations.Position) (DeliveryPage, error)
	// RequeueDelivery sets a delivery back to pending, due at now, and
	// drops any claim on it.
	RequeueDelivery(ctx context.Context, accountID, endpointID, id string, now time.Time) (bool, error)
	// DueDeliveries lists up to limit pending deliveries due at or
	// before now, due longest ago first, of endpoints not in busy.
	DueDeliveries(ctx context.Context, now time.Time, busy []string, limit int) ([]Delivery, error)
	// ClaimDeliveries claims each of ds that is still pending, due at or
	// before now and at its attempt count: it stays with claim until
	// leaseUntil. It returns the ids it claimed.
	ClaimDeliveries(ctx context.Context, ds []Delivery, now, leaseUntil time.Time, claim string) ([]string, error)
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

	// EndpointsOf reads the endpoints of the accounts, enabled or not
	// (the fan-out of what their relay just ordered).
	EndpointsOf(ctx context.Context, accountIDs []string) ([]Endpoint, error)
	// EnabledEndpoints reads the enabled endpoints of the accounts of
	// slots (nil: of every account), and may return others' (the
	// fan-out's recovery sweep).
	EnabledEndpoints(ctx context.Context, slots []int) ([]Endpoint, error)
	// AdvanceCursors moves each endpoint's event cursor forward to the
	// sequence given, never back (an enable that moved it further wins).
	AdvanceCursors(ctx context.Context, cursors []CursorMove) error
	// MarkEndpointFailing sets failing_since to at unless it is set and
	// returns the endpoint after; MarkEndpointHealthy clears it.
	MarkEndpointFailing(ctx context.Context, accountID, id string, at time.Time) (Endpoint, error)
	MarkEndpointHealthy(ctx context.Context, accountID, id string) error
	// DisableEndpoint disables an enabled endpoint with reason.
	DisableEndpoint(ctx context.Context, accountID, id, reason string, at time.Time) (bool, error)
}

// CursorMove is an endpoint's event cursor moved forward by a fan-out.
type CursorMove struct {
	AccountID, EndpointID string
	Cursor                int64
}

// NewEndpointID and NewDeliveryID return fresh ids.
func NewEndpointID() string { return validation.NewRandomID("whk_") }

// NewDeliveryID: see NewEndpointID.
func NewDeliveryID() string { return validation.NewRandomID("dlv_") }

// ValidEndpointID reports whether id has the form of an endpoint id.
func ValidEndpointID(id string) bool { return validation.IsRandomID(id, "whk_") }

// ValidDeliveryID reports whether id has the form of a delivery id.
func ValidDeliveryID(id string) bool { return validation.IsRandomID(id, "dlv_") }
