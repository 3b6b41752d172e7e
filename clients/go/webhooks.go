package client

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Webhook endpoints: a service client with the
// scopes webhooks:manage and conversations:read manages the endpoints of
// its account; VerifyWebhook checks a delivery a receiver got.

// Webhook is an endpoint that receives the account's events.
type Webhook struct {
	ID  string `json:"id"`
	URL string `json:"url"`
	// Events are the event types it receives, or ["*"] for all.
	Events      []string `json:"events"`
	Description string   `json:"description"`
	Enabled     bool     `json:"enabled"`
	// DisabledReason says why the service disabled it (a 410, or failing
	// for days); nil otherwise.
	DisabledReason *string   `json:"disabledReason"`
	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`
	// Secret is set only by CreateWebhook: the only time it is shown.
	// Keep it to verify deliveries (VerifyWebhook).
	Secret string `json:"secret,omitempty"`
}

// NewWebhook holds the members of an endpoint to create; URL is required.
type NewWebhook struct {
	URL string `json:"url"`
	// Events are the types to receive; nil means all (["*"]).
	Events      []string `json:"events,omitempty"`
	Description string   `json:"description,omitempty"`
	// Enabled, when not nil, sets whether it receives events (default true).
	Enabled *bool `json:"enabled,omitempty"`
}

// WebhookPatch is a change of an endpoint (a JSON merge patch): the
// members set are changed, the others kept.
type WebhookPatch struct {
	URL         *string   `json:"url,omitempty"`
	Events      *[]string `json:"events,omitempty"`
	Description *string   `json:"description,omitempty"`
	Enabled     *bool     `json:"enabled,omitempty"`
}

// The states of a delivery.
const (
	DeliveryPending   = "pending"
	DeliverySucceeded = "succeeded"
	DeliveryFailed    = "failed"
)

// WebhookDelivery is one event to one endpoint, with the outcome of its
// last attempt.
type WebhookDelivery struct {
	ID        string `json:"id"`
	EventID   string `json:"eventId"`
	EventType string `json:"eventType"`
	Attempts  int    `json:"attempts"`
	// State is DeliveryPending, DeliverySucceeded or DeliveryFailed.
	State          string     `json:"state"`
	ResponseStatus *int       `json:"responseStatus"`
	DurationMs     *int64     `json:"durationMs"`
	Error          *string    `json:"error"`
	NextAttemptAt  *time.Time `json:"nextAttemptAt"`
	CreatedAt      time.Time  `json:"createdAt"`
	UpdatedAt      time.Time  `json:"updatedAt"`
}

// WebhookPage is one page of endpoints.
type WebhookPage struct {
	Webhooks []Webhook
	// NextURL is the next page's absolute URL, "" on the last page.
	NextURL string
}

// DeliveryPage is one page of an endpoint's deliveries.
type DeliveryPage struct {
	Deliveries []WebhookDelivery
	NextURL    string
}

// CreateWebhook creates an endpoint (POST /v1/webhooks). The returned
// Webhook carries its Secret, which is never shown again. More than 20
// endpoints per account is an *Error with the code too_many_endpoints
// (ErrTooManyEndpoints).
func (c *Client) CreateWebhook(ctx context.Context, w NewWebhook) (Webhook, error) {
	u, err := c.conversationsURL("CreateWebhook", "v1", "webhooks")
	if err != nil {
		return Webhook{}, err
	}
	var out Webhook
	_, err = c.call(ctx, request{method: http.MethodPost, url: u}, w, &out)
	return out, err
}

// GetWebhook returns one endpoint (GET /v1/webhooks/{id}), without its secret.
func (c *Client) GetWebhook(ctx context.Context, id string) (Webhook, error) {
	u, err := c.conversationsURL("GetWebhook", "v1", "webhooks", id)
	if err != nil {
		return Webhook{}, err
	}
	var out Webhook
	_, err = c.call(ctx, request{method: http.MethodGet, url: u}, nil, &out)
	return out, err
}

// UpdateWebhook changes an endpoint (PATCH /v1/webhooks/{id}, a merge
// patch) and returns it as stored. Enabling a disabled endpoint clears
// its DisabledReason.
func (c *Client) UpdateWebhook(ctx context.Context, id string, patch WebhookPatch) (Webhook, error) {
	u, err := c.conversationsURL("UpdateWebhook", "v1", "webhooks", id)
	if err != nil {
		return Webhook{}, err
	}
	var out Webhook
	_, err = c.call(ctx, request{method: http.MethodPatch, url: u, contentType: "application/merge-patch+json"}, patch, &out)
	return out, err
}

// DeleteWebhook deletes an endpoint (DELETE /v1/webhooks/{id}).
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	u, err := c.conversationsURL("DeleteWebhook", "v1", "webhooks", id)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, request{method: http.MethodDelete, url: u}, nil, nil)
	return err
}

// RotateWebhookSecret gives the endpoint a new secret and returns it
// (POST /v1/webhooks/{id}/rotate-secret). The previous secret keeps
// signing beside it for overlap (whole seconds; 0 stops it at once); a
// negative overlap means the service's default, 24 hours.
func (c *Client) RotateWebhookSecret(ctx context.Context, id string, overlap time.Duration) (string, error) {
	u, err := c.conversationsURL("RotateWebhookSecret", "v1", "webhooks", id, "rotate-secret")
	if err != nil {
		return "", err
	}
	body := map[string]int64{}
	if overlap >= 0 {
		body["overlap"] = int64(overlap / time.Second)
	}
	var out struct {
		Secret string `json:"secret"`
	}
	_, err = c.call(ctx, request{method: http.MethodPost, url: u}, body, &out)
	return out.Secret, err
}

// TestWebhook sends a webhook.test event to this endpoint only
// (POST /v1/webhooks/{id}/test) and returns its delivery, pending.
func (c *Client) TestWebhook(ctx context.Context, id string) (WebhookDelivery, error) {
	u, err := c.conversationsURL("TestWebhook", "v1", "webhooks", id, "test")
	if err != nil {
		return WebhookDelivery{}, err
	}
	var out WebhookDelivery
	_, err = c.call(ctx, request{method: http.MethodPost, url: u}, nil, &out)
	return out, err
}

// RetryWebhookDelivery delivers one delivery again now, with the same
// webhook-id (POST /v1/webhooks/{id}/deliveries/{deliveryId}/retry).
func (c *Client) RetryWebhookDelivery(ctx context.Context, id, deliveryID string) error {
	u, err := c.conversationsURL("RetryWebhookDelivery", "v1", "webhooks", id, "deliveries", deliveryID, "retry")
	if err != nil {
		return err
	}
	_, err = c.call(ctx, request{method: http.MethodPost, url: u}, nil, nil)
	return err
}

// ListWebhooksPage returns one page of the account's endpoints, newest
// first: the first with cursorURL "" (limit 0: the service's default),
// else the page at cursorURL, a NextURL of a previous page.
func (c *Client) ListWebhooksPage(ctx context.Context, limit int, cursorURL string) (WebhookPage, error) {
	list, err := c.conversationsURL("ListWebhooksPage", "v1", "webhooks")
	if err != nil {
		return WebhookPage{}, err
	}
	items, next, err := listPage[Webhook](ctx, c, c.convURL, list, limitQuery(limit), cursorURL)
	if err != nil {
		return WebhookPage{}, err
	}
	return WebhookPage{Webhooks: items, NextURL: next}, nil
}

// Webhooks iterates over every endpoint of the account, page by page.
func (c *Client) Webhooks(ctx context.Context) iter.Seq2[Webhook, error] {
	return paginate("/v1/webhooks", func(next string) ([]Webhook, string, error) {
		page, err := c.ListWebhooksPage(ctx, 0, next)
		return page.Webhooks, page.NextURL, err
	})
}

// ListWebhookDeliveriesPage returns one page of the endpoint's
// deliveries, newest first (GET /v1/webhooks/{id}/deliveries).
func (c *Client) ListWebhookDeliveriesPage(ctx context.Context, id string, limit int, cursorURL string) (DeliveryPage, error) {
	list, err := c.conversationsURL("ListWebhookDeliveriesPage", "v1", "webhooks", id, "deliveries")
	if err != nil {
		return DeliveryPage{}, err
	}
	items, next, err := listPage[WebhookDelivery](ctx, c, c.convURL, list, limitQuery(limit), cursorURL)
	if err != nil {
		return DeliveryPage{}, err
	}
	return DeliveryPage{Deliveries: items, NextURL: next}, nil
}

// WebhookDeliveries iterates over every delivery of the endpoint, newest first.
func (c *Client) WebhookDeliveries(ctx context.Context, id string) iter.Seq2[WebhookDelivery, error] {
	return paginate("/v1/webhooks/"+id+"/deliveries", func(next string) ([]WebhookDelivery, string, error) {
		page, err := c.ListWebhookDeliveriesPage(ctx, id, 0, next)
		return page.Deliveries, page.NextURL, err
	})
}

// WebhookTolerance is how far a delivery's webhook-timestamp may be from
// the receiver's clock.
const WebhookTolerance = 5 * time.Minute

// Why VerifyWebhook refuses a delivery; a *WebhookError wraps one of them.
var (
	ErrWebhookHeaders   = errors.New("missing or malformed webhook-id, webhook-timestamp or webhook-signature")
	ErrWebhookTimestamp = errors.New("webhook-timestamp is more than 5 minutes from now")
	ErrWebhookSignature = errors.New("no signature matches any of the secrets")
	ErrWebhookPayload   = errors.New("the body is not an event")
	ErrWebhookSecret    = errors.New("a secret is not whsec_ and base64")
)

// WebhookError is a refused delivery: errors.Is(err, ErrWebhookSignature)
// and the others tell why.
type WebhookError struct {
	Reason error
	Detail string
}

func (e *WebhookError) Error() string {
	if e.Detail == "" {
		return "webhook: " + e.Reason.Error()
	}
	return "webhook: " + e.Reason.Error() + ": " + e.Detail
}

func (e *WebhookError) Unwrap() error { return e.Reason }

// VerifyWebhook checks a delivery per Standard Webhooks v1: the
// signature over webhook-id, webhook-timestamp and the raw body, under any
// of secrets (several while a secret is rotated), compared in constant
// time, and the timestamp within 5 minutes of now. It returns the event,
// or a *WebhookError. Pass the body exactly as received, before any JSON
// parsing. The event is the feed's [Event]: the types of the feed, and
// EventWebhookTest (Sequence 0, Data.EndpointID set) for a test delivery.
// Its ID is the webhook-id, the same on every attempt: a receiver drops
// the repeats of one it handled. Deliveries may arrive out of order: order
// by Sequence.
func VerifyWebhook(secrets []string, header http.Header, body []byte) (Event, error) {
	return VerifyWebhookAt(secrets, header, body, time.Now())
}

// VerifyWebhookAt is VerifyWebhook with the receiver's clock at now (a
// replay of a stored delivery, or a test).
func VerifyWebhookAt(secrets []string, header http.Header, body []byte, now time.Time) (Event, error) {
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return Event{}, &WebhookError{Reason: ErrWebhookHeaders}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Event{}, &WebhookError{Reason: ErrWebhookHeaders, Detail: "webhook-timestamp is not Unix seconds"}
	}
	if at := time.Unix(sec, 0); at.Before(now.Add(-WebhookTolerance)) || at.After(now.Add(WebhookTolerance)) {
		return Event{}, &WebhookError{Reason: ErrWebhookTimestamp}
	}
	var expected [][]byte
	for _, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(key) == 0 {
			return Event{}, &WebhookError{Reason: ErrWebhookSecret}
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		expected = append(expected, mac.Sum(nil))
	}
	matched := false
	for _, versioned := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(versioned, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		for _, want := range expected {
			// Every comparison runs: constant time in the secrets tried.
			if hmac.Equal(got, want) {
				matched = true
			}
		}
	}
	if !matched {
		return Event{}, &WebhookError{Reason: ErrWebhookSignature}
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" || ev.Type == "" {
		return Event{}, &WebhookError{Reason: ErrWebhookPayload}
	}
	if ev.ID != id {
		return Event{}, &WebhookError{Reason: ErrWebhookPayload, Detail: fmt.Sprintf("the body's id %q is not the webhook-id", ev.ID)}
	}
	return ev, nil
}
