package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/platform/pkg/tracing"
	"github.com/acme/platform/services/conversations"
)

// Service is the one place of the rules of webhooks: who
// may manage endpoints (the HTTP layer checks the scopes; every call here
// is scoped by the caller's account), their limits, secrets and their
// rotation, which events become deliveries, and what an attempt's outcome
// does: the retry schedule with jitter, Retry-After, 410 and five days of
// failures disabling the endpoint. The delivery engine (package delivery)
// makes the HTTP requests and calls FanOut, ClaimAttempts and
// FinishAttempts; the store persists.
type Service struct {
	Store Store
	// Events is the account's event log; nil: only webhook.test events
	// are delivered.
	Events EventLog
	Box    *SecretBox
	URLs   URLPolicy
	// MaxEndpoints per account (the OpenAPI document: 20).
	MaxEndpoints int
	// ManualPerMinute bounds test and retry requests per endpoint.
	ManualPerMinute int
	// RetrySchedule is the wait before each retry after a failure; an
	// attempt failing after the last is final.
	RetrySchedule []time.Duration
	// DisableAfter disables an endpoint failing without a success for
	// that long.
	DisableAfter time.Duration
	// Wake tells the local delivery engine that a delivery is due now
	// (nil: it finds it at its next poll).
	Wake func()
	Now  func() time.Time

	// contendedUntil is when (Unix nanoseconds) this replica's claims
	// go back to taking the deliveries due longest ago first: until then
	// they pick at random among those read (see ClaimAttempts).
	contendedUntil atomic.Int64
}

// DefaultRetrySchedule is the documented retry schedule.
var DefaultRetrySchedule = []time.Duration{
	5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
}

// Defaults of the limits.
const (
	DefaultMaxEndpoints    = 20
	DefaultManualPerMinute = 10
	DefaultDisableAfter    = 5 * 24 * time.Hour
	// DefaultDeliveryRetention is how long finished deliveries are kept.
	DefaultDeliveryRetention = 30 * 24 * time.Hour
	// quotaWindow is the window of the test and retry budgets.
	quotaWindow = time.Minute
	// MaxRetryAfter caps how far a Retry-After postpones an attempt.
	MaxRetryAfter = 24 * time.Hour
	// retryJitter is the ± share of each retry delay.
	retryJitter = 0.2
	// fanoutBatch is how many events one fan-out step reads.
	fanoutBatch = 100
	// maxClaimBatch bounds the deliveries one claim reads.
	maxClaimBatch = 500
	// contendedFor is how long a claim that lost deliveries to another
	// replica makes this replica's claims pick at random.
	contendedFor = 10 * time.Second
)

func (w *Service) now() time.Time {
	t := time.Now()
	if w.Now != nil {
		t = w.Now()
	}
	return t.UTC().Truncate(time.Millisecond)
}

func (w *Service) maxEndpoints() int {
	if w.MaxEndpoints > 0 {
		return w.MaxEndpoints
	}
	return DefaultMaxEndpoints
}

func (w *Service) wake() {
	if w.Wake != nil {
		w.Wake()
	}
}

// latestSequence is where a new or re-enabled endpoint starts: events
// recorded from now on are its.
func (w *Service) latestSequence(ctx context.Context, accountID string) (int64, error) {
	if w.Events == nil {
		return 0, nil
	}
	return w.Events.NewestSequence(ctx, accountID)
}

// CreateEndpoint validates in and stores a new endpoint of who's account
// with a new secret, which it returns: the only time it is shown.
func (w *Service) CreateEndpoint(ctx context.Context, who conversations.Caller, in NewEndpoint) (Endpoint, string, error) {
	e, err := in.Endpoint(w.URLs)
	if err != nil {
		return Endpoint{}, "", err
	}
	n, err := w.Store.CountEndpoints(ctx, who.AccountID)
	if err != nil {
		return Endpoint{}, "", err
	}
	if n >= w.maxEndpoints() {
		return Endpoint{}, "", ErrTooManyEndpoints
	}
	if e.EventCursor, err = w.latestSequence(ctx, who.AccountID); err != nil {
		return Endpoint{}, "", err
	}
	now := w.now()
	e.ID, e.AccountID, e.CreatedAt, e.UpdatedAt, e.Version = NewEndpointID(), who.AccountID, now, now, 1
	secret := NewSecret()
	e.Secrets = []SealedSecret{{Sealed: w.Box.Seal(e.ID, secret)}}
	if err := w.Store.InsertEndpoint(ctx, e); err != nil {
		return Endpoint{}, "", err
	}
	// Concurrent creations may have passed the count together: the one
	// that finds more than the limit after its insert takes it back.
	if n, err := w.Store.CountEndpoints(ctx, who.AccountID); err != nil || n > w.maxEndpoints() {
		if _, delErr := w.Store.DeleteEndpoint(ctx, who.AccountID, e.ID); delErr != nil {
			return Endpoint{}, "", delErr
		}
		if err != nil {
			return Endpoint{}, "", err
		}
		return Endpoint{}, "", ErrTooManyEndpoints
	}
	return e, secret, nil
}

// GetEndpoint returns the endpoint id of who's account.
func (w *Service) GetEndpoint(ctx context.Context, who conversations.Caller, id string) (Endpoint, error) {
	return w.Store.FindEndpoint(ctx, who.AccountID, id)
}

// ListEndpoints returns a page of who's account's endpoints, newest first.
func (w *Service) ListEndpoints(ctx context.Context, who conversations.Caller, limit int, after *conversations.Position) (EndpointPage, error) {
	return w.Store.ListEndpoints(ctx, who.AccountID, limit, after)
}

// UpdateEndpoint applies patch (compare-and-set, retried on a concurrent
// change). Enabling a disabled endpoint clears its reason and starts it
// at the account's newest event.
func (w *Service) UpdateEndpoint(ctx context.Context, who conversations.Caller, id string, patch Patch) (Endpoint, error) {
	return w.changeEndpoint(ctx, who, id, func(e *Endpoint) error {
		if patch.URL != nil {
			e.URL = *patch.URL
		}
		if patch.Events != nil {
			e.Events = *patch.Events
		}
		if patch.Description != nil {
			e.Description = *patch.Description
		}
		if patch.Enabled != nil && *patch.Enabled != e.Enabled {
			e.Enabled = *patch.Enabled
			e.DisabledReason, e.FailingSince = nil, nil
			if e.Enabled {
				seq, err := w.latestSequence(ctx, who.AccountID)
				if err != nil {
					return err
				}
				e.EventCursor = seq
			}
		}
		return nil
	})
}

// RotateSecret gives the endpoint a new secret, which it returns; the
// current one keeps signing beside it for the rotation's overlap (0:
// stops at once). A secret still in its overlap from an earlier rotation
// stops now.
func (w *Service) RotateSecret(ctx context.Context, who conversations.Caller, id string, r Rotation) (string, error) {
	overlap, err := r.overlap()
	if err != nil {
		return "", err
	}
	secret := NewSecret()
	_, err = w.changeEndpoint(ctx, who, id, func(e *Endpoint) error {
		now := w.now()
		next := []SealedSecret{{Sealed: w.Box.Seal(e.ID, secret)}}
		if overlap > 0 && len(e.Secrets) > 0 {
			until := now.Add(overlap)
			next = append(next, SealedSecret{Sealed: e.Secrets[0].Sealed, NotAfter: &until})
		}
		e.Secrets = next
		return nil
	})
	if err != nil {
		return "", err
	}
	return secret, nil
}

// changeEndpoint reads, applies apply and stores with a compare-and-set,
// retried while other changes win.
func (w *Service) changeEndpoint(ctx context.Context, who conversations.Caller, id string, apply func(*Endpoint) error) (Endpoint, error) {
	for range conversations.MaxChangeAttempts {
		e, err := w.Store.FindEndpoint(ctx, who.AccountID, id)
		if err != nil {
			return Endpoint{}, err
		}
		from := e.Version
		if err := apply(&e); err != nil {
			return Endpoint{}, err
		}
		e.UpdatedAt = w.now()
		if !e.UpdatedAt.After(e.CreatedAt) {
			e.UpdatedAt = e.CreatedAt
		}
		e.Version = from + 1
		ok, err := w.Store.SaveEndpoint(ctx, e, from)
		if err != nil {
			return Endpoint{}, err
		}
		if ok {
			return e, nil
		}
	}
	return Endpoint{}, conversations.ErrContended
}

// DeleteEndpoint deletes the endpoint; its pending deliveries end failed
// when the engine meets them.
func (w *Service) DeleteEndpoint(ctx context.Context, who conversations.Caller, id string) error {
	ok, err := w.Store.DeleteEndpoint(ctx, who.AccountID, id)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("endpoint %q: %w", id, ErrEndpointNotFound)
	}
	return nil
}

// takeManualQuota charges a test or retry request to the endpoint.
func (w *Service) takeManualQuota(ctx context.Context, accountID, endpointID, kind string) error {
	limit := w.ManualPerMinute
	if limit <= 0 {
		limit = DefaultManualPerMinute
	}
	wait, err := w.Store.TakeQuota(ctx, accountID, endpointID, kind, w.now(), quotaWindow, limit)
	if err != nil {
		return err
	}
	if wait > 0 {
		return &RateLimitedError{RetryAfter: wait}
	}
	return nil
}

// SendTest records a webhook.test event for this endpoint only, due now.
func (w *Service) SendTest(ctx context.Context, who conversations.Caller, id string) (Delivery, error) {
	e, err := w.Store.FindEndpoint(ctx, who.AccountID, id)
	if err != nil {
		return Delivery{}, err
	}
	if err := w.takeManualQuota(ctx, who.AccountID, e.ID, "test"); err != nil {
		return Delivery{}, err
	}
	now := w.now()
	eventID := conversations.NewEventID()
	payload, err := json.Marshal(map[string]any{
		"id": eventID, "type": EventTypeTest, "sequence": nil, "timestamp": conversations.FormatTime(now),
		"data": map[string]any{"endpointId": e.ID},
	})
	if err != nil {
		return Delivery{}, fmt.Errorf("encode test event: %w", err)
	}
	d := w.newDelivery(e, eventID, EventTypeTest, now, payload, now)
	if err := w.Store.InsertDeliveries(ctx, []Delivery{d}); err != nil {
		return Delivery{}, err
	}
	w.wake()
	return d, nil
}

// newDelivery is the delivery of one event to e, due now; payload is the
// body every attempt sends.
func (w *Service) newDelivery(e Endpoint, eventID, eventType string, eventTime time.Time, payload []byte, now time.Time) Delivery {
	due := now
	return Delivery{
		ID: NewDeliveryID(), AccountID: e.AccountID, EndpointID: e.ID,
		EventID: eventID, EventType: eventType, EventTime: eventTime.UTC(), Payload: payload,
		State: DeliveryPending, NextAttemptAt: &due, CreatedAt: now, UpdatedAt: now,
	}
}

// ListDeliveries returns a page of the endpoint's deliveries, newest first.
func (w *Service) ListDeliveries(ctx context.Context, who conversations.Caller, endpointID string, limit int, after *conversations.Position) (DeliveryPage, error) {
	if _, err := w.Store.FindEndpoint(ctx, who.AccountID, endpointID); err != nil {
		return DeliveryPage{}, err
	}
	return w.Store.ListDeliveries(ctx, who.AccountID, endpointID, limit, after)
}

// RetryDelivery sets the delivery back to pending, due now (same event
// id, so the same webhook-id).
func (w *Service) RetryDelivery(ctx context.Context, who conversations.Caller, endpointID, deliveryID string) error {
	if _, err := w.Store.FindEndpoint(ctx, who.AccountID, endpointID); err != nil {
		return err
	}
	if err := w.takeManualQuota(ctx, who.AccountID, endpointID, "retry"); err != nil {
		return err
	}
	ok, err := w.Store.RequeueDelivery(ctx, who.AccountID, endpointID, deliveryID, w.now())
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("delivery %q: %w", deliveryID, ErrDeliveryNotFound)
	}
	w.wake()
	return nil
}

// FanOutAccounts records, for each account, a delivery of each event
// after an enabled endpoint's cursor that the endpoint subscribes to,
// and moves the cursors past the events read. The replica whose relay
// ordered an account's events calls it for that account (no other
// replica looks for them), and FanOutSweep finds what a replica that
// died left. It returns the accounts with more events than one read
// takes. Deliveries are keyed by (endpoint, event) and cursors only move
// forward, so two replicas fanning out one account at once (a partition
// changing hands) store each delivery once.
func (w *Service) FanOutAccounts(ctx context.Context, accountIDs []string) ([]string, error) {
	if w.Events == nil || len(accountIDs) == 0 {
		return nil, nil
	}
	endpoints, err := w.Store.EndpointsOf(ctx, accountIDs)
	if err != nil {
		return nil, err
	}
	return w.fanOut(ctx, endpoints)
}

// FanOutSweep fans out the accounts of slots (conversations.PendingSlot;
// nil: every account) that have an enabled endpoint, whether their
// events were fanned out or not: the recovery of what a replica left
// when it died between ordering events and fanning them out. It returns
// the accounts with more events than one read takes.
func (w *Service) FanOutSweep(ctx context.Context, slots []int) ([]string, error) {
	if w.Events == nil || slots != nil && len(slots) == 0 {
		return nil, nil
	}
	endpoints, err := w.Store.EnabledEndpoints(ctx, slots)
	if err != nil {
		return nil, err
	}
	if slots != nil {
		endpoints = slices.DeleteFunc(endpoints, func(e Endpoint) bool {
			return !slices.Contains(slots, conversations.PendingSlot(e.AccountID))
		})
	}
	return w.fanOut(ctx, endpoints)
}

// fanOut reads, for each account of the endpoints, the events after the
// lowest cursor of its enabled endpoints (one read an account), stores
// the deliveries of all accounts in one write, and then advances the
// cursors in one more: a crash between the two costs a repeat that the
// unique (endpoint, event) index absorbs.
func (w *Service) fanOut(ctx context.Context, endpoints []Endpoint) ([]string, error) {
	byAccount := map[string][]Endpoint{}
	for _, e := range endpoints {
		if e.Enabled {
			byAccount[e.AccountID] = append(byAccount[e.AccountID], e)
		}
	}
	now, start := w.now(), time.Now()
	var ds []Delivery
	var more []string
	var cursors []CursorMove
	var traces []string // of the events read, for the span's links
	for _, account := range slices.Sorted(maps.Keys(byAccount)) {
		es := byAccount[account]
		after := slices.MinFunc(es, func(a, b Endpoint) int { return cmp.Compare(a.EventCursor, b.EventCursor) }).EventCursor
		events, err := w.Events.ListEvents(ctx, conversations.EventRange{AccountID: account, After: after, Limit: fanoutBatch})
		if err != nil {
			return more, err
		}
		if len(events) == fanoutBatch {
			more = append(more, account)
		}
		for _, ev := range events {
			traces = append(traces, ev.Trace)
		}
		// As the feed writes it: the stored data as it is, not validated
		// again by json.Marshal for every endpoint that reads the event.
		payloads := make([][]byte, len(events))
		for i, ev := range events {
			if payloads[i], err = ev.AppendJSON(nil); err != nil {
				return more, fmt.Errorf("encode event %s: %w", ev.ID, err)
			}
		}
		for _, e := range es {
			cursor := e.EventCursor
			for i, ev := range events {
				if ev.Sequence <= e.EventCursor {
					continue
				}
				cursor = max(cursor, ev.Sequence)
				if e.Subscribed(string(ev.Type)) {
					d := w.newDelivery(e, ev.ID, string(ev.Type), ev.Timestamp, payloads[i], now)
					d.Trace = ev.Trace // its attempts continue the request's trace
					ds = append(ds, d)
				}
			}
			if cursor > e.EventCursor {
				cursors = append(cursors, CursorMove{AccountID: e.AccountID, EndpointID: e.ID, Cursor: cursor})
			}
		}
	}
	if len(traces) > 0 && tracing.On() {
		// A span linked to the requests whose changes it fans out.
		var span trace.Span
		ctx, span = tracing.Start(ctx, "webhook fan-out", trace.WithTimestamp(start),
			trace.WithLinks(tracing.Links(traces...)...), trace.WithAttributes(attribute.Int("acme.events", len(traces))))
		defer span.End()
	}
	if len(ds) > 0 {
		if err := w.Store.InsertDeliveries(ctx, ds); err != nil {
			return more, err
		}
		w.wake()
	}
	return more, w.Store.AdvanceCursors(ctx, cursors)
}

// Attempt is one claimed delivery, ready to send.
type Attempt struct {
	Delivery Delivery
	URL      string
	// Secrets sign this attempt (newest first); empty when the
	// delivery cannot be attempted (Refusal says why).
	Secrets []string
	// Refusal is set when the delivery ends without a request: its
	// endpoint was deleted or disabled.
	Refusal string
	claim   string
	// failing: the endpoint had failed since its last success when read.
	failing bool
}

// Slots is the room an engine has for new attempts: Free in all, and for
// each endpoint PerEndpoint less what InFlight counts for it.
type Slots struct {
	Free        int
	PerEndpoint int
	InFlight    map[string]int
}

// room is how many more attempts of endpoint fit.
func (s Slots) room(endpoint string) int { return s.PerEndpoint - s.InFlight[endpoint] }

// ClaimAttempts claims, for lease, the deliveries due longest ago (and at
// least overdue ago) that slots has room for, in one batch: one read of
// those due, one write claiming them, one read of their endpoints. It
// reports whether more may be due than it looked at (the engine then
// claims again as soon as it has room). Replicas read the same
// deliveries due, and all but one lose each to the compare-and-set:
// after a claim lost some, this replica picks at random among those it
// read (up to twice its room, all due) for contendedFor, so that
// replicas claim different ones.
func (w *Service) ClaimAttempts(ctx context.Context, claim string, lease, overdue time.Duration, slots Slots) ([]Attempt, bool, error) {
	if slots.Free <= 0 {
		return nil, false, nil
	}
	var busy []string
	for id := range slots.InFlight {
		if slots.room(id) <= 0 {
			busy = append(busy, id)
		}
	}
	// Twice the free slots: some of those due may be of an endpoint with
	// room for fewer than it has due.
	limit := min(2*slots.Free, maxClaimBatch)
	now := w.now()
	due, err := w.Store.DueDeliveries(ctx, now.Add(-overdue), busy, limit)
	if err != nil {
		return nil, false, err
	}
	more := len(due) == limit
	order := due
	if now.UnixNano() < w.contendedUntil.Load() {
		order = slices.Clone(due)
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	taken := map[string]int{}
	var picked []Delivery
	for _, d := range order {
		if len(picked) == slots.Free {
			break
		}
		if taken[d.EndpointID] < slots.room(d.EndpointID) {
			taken[d.EndpointID]++
			picked = append(picked, d)
		}
	}
	if len(picked) < len(due) {
		more = true
	}
	if len(picked) == 0 {
		return nil, more, nil
	}
	leaseUntil := now.Add(lease)
	ids, err := w.Store.ClaimDeliveries(ctx, picked, now, leaseUntil, claim)
	if err != nil {
		return nil, more, err
	}
	if len(ids) < len(picked) {
		w.contendedUntil.Store(now.Add(contendedFor).UnixNano())
	}
	if len(ids) == 0 {
		return nil, more, nil
	}
	won := make(map[string]bool, len(ids))
	for _, id := range ids {
		won[id] = true
	}
	// The endpoints of the deliveries won only.
	var refs []EndpointRef
	for id := range taken {
		if i := slices.IndexFunc(picked, func(d Delivery) bool { return d.EndpointID == id && won[d.ID] }); i >= 0 {
			refs = append(refs, EndpointRef{AccountID: picked[i].AccountID, ID: id})
		}
	}
	// On an error below, what was claimed is not attempted: the leases
	// hand it over.
	endpoints, err := w.Store.FindEndpoints(ctx, refs)
	if err != nil {
		return nil, more, err
	}
	byID := make(map[string]Endpoint, len(endpoints))
	for _, e := range endpoints {
		byID[e.ID] = e
	}
	secrets := map[string][]string{}
	var out []Attempt
	for _, d := range picked {
		if !won[d.ID] {
			continue
		}
		d.Claim, d.NextAttemptAt = claim, &leaseUntil // as stored
		a := Attempt{Delivery: d, claim: claim}
		e, ok := byID[d.EndpointID]
		switch {
		case !ok:
			a.Refusal = "the endpoint was deleted"
		case !e.Enabled:
			a.Refusal = "the endpoint is disabled"
		default:
			a.URL, a.failing = e.URL, e.FailingSince != nil
			if _, opened := secrets[e.ID]; !opened {
				if secrets[e.ID], err = w.Box.SigningSecrets(e, now); err != nil {
					return nil, more, err
				}
			}
			a.Secrets = secrets[e.ID]
		}
		out = append(out, a)
	}
	return out, more, nil
}

// AttemptResult is what one HTTP attempt came to.
type AttemptResult struct {
	// Status is the response's status; 0 when there was none.
	Status   int
	Duration time.Duration
	// Error says why the attempt failed ("" for a 2xx).
	Error string
	// RetryAfter is the response's Retry-After (429, 503), if any.
	RetryAfter time.Duration
}

// Succeeded: a complete 2xx (a 2xx whose body broke off or timed out
// carries an Error and failed).
func (r AttemptResult) Succeeded() bool { return r.Status >= 200 && r.Status < 300 && r.Error == "" }

// FinishOutcome tells the engine what was recorded.
type FinishOutcome struct {
	// Recorded is false when the claim had expired and another replica
	// holds the delivery: nothing was written.
	Recorded bool
	State    DeliveryState
	// NextAttemptAt is when a delivery left pending is due again.
	NextAttemptAt *time.Time
	// Disabled is set when this attempt disabled the endpoint.
	Disabled bool
}

// FinishAttempts records the attempts' outcomes, each while its claim
// holds, in one write: a 2xx succeeds; otherwise the next retry of the
// schedule (±20 %, at least a Retry-After) or, after the last, failed. A
// 410 disables the endpoint and fails the delivery; so does failing
// without a success for DisableAfter. What an attempt tells of its
// endpoint (healthy, failing, gone) is recorded even when its claim had
// expired: the request was made.
func (w *Service) FinishAttempts(ctx context.Context, as []Attempt, rs []AttemptResult) ([]FinishOutcome, error) {
	now := w.now()
	records := make([]AttemptRecord, len(as))
	outs := make([]FinishOutcome, len(as))
	for i, a := range as {
		records[i] = AttemptRecord{AccountID: a.Delivery.AccountID, ID: a.Delivery.ID, Claim: a.claim, Attempts: a.Delivery.Attempts, Outcome: w.outcome(a, rs[i], now)}
		outs[i].State, outs[i].NextAttemptAt = records[i].Outcome.State, records[i].Outcome.NextAttemptAt
	}
	recorded, err := w.Store.FinishAttempts(ctx, records)
	if err != nil {
		return outs, err
	}
	// Each endpoint is judged once per batch, by a 410 if one answered
	// it, otherwise by its last attempt in the batch.
	judged := map[string]int{}
	for i, a := range as {
		outs[i].Recorded = recorded[i]
		if a.Refusal != "" {
			continue
		}
		if j, ok := judged[a.Delivery.EndpointID]; !ok || rs[j].Status != 410 {
			judged[a.Delivery.EndpointID] = i
		}
	}
	for _, i := range judged {
		disabled, err := w.judgeEndpoint(ctx, as[i], rs[i], now)
		if err != nil {
			return outs, err
		}
		outs[i].Disabled = disabled
	}
	return outs, nil
}

// outcome is what an attempt's result makes of its delivery.
func (w *Service) outcome(a Attempt, r AttemptResult, now time.Time) AttemptOutcome {
	o := AttemptOutcome{At: now, DurationMs: r.Duration.Milliseconds()}
	if r.Status != 0 {
		status := r.Status
		o.ResponseStatus = &status
	}
	if a.Refusal != "" {
		r.Error = a.Refusal
	}
	if r.Error != "" {
		msg := r.Error
		o.Error = &msg
	}
	switch {
	case a.Refusal != "":
		o.State = DeliveryFailed
	case r.Succeeded():
		o.State = DeliverySucceeded
	case r.Status == 410 || a.Delivery.Attempts+1 > len(w.schedule()):
		o.State = DeliveryFailed
	default:
		o.State = DeliveryPending
		next := now.Add(w.retryDelay(a.Delivery.Attempts, r.RetryAfter))
		o.NextAttemptAt = &next
	}
	return o
}

// judgeEndpoint records what an attempt tells of its endpoint: a 2xx
// makes a failing one healthy, a 410 disables it, another failure marks
// it failing and disables it after DisableAfter of failing. It reports
// whether it disabled the endpoint.
func (w *Service) judgeEndpoint(ctx context.Context, a Attempt, r AttemptResult, now time.Time) (bool, error) {
	account, endpoint := a.Delivery.AccountID, a.Delivery.EndpointID
	if r.Succeeded() {
		if !a.failing {
			return false, nil // healthy already: no write
		}
		return false, w.Store.MarkEndpointHealthy(ctx, account, endpoint)
	}
	if r.Status == 410 {
		return w.Store.DisableEndpoint(ctx, account, endpoint, "the endpoint answered 410 Gone", now)
	}
	e, err := w.Store.MarkEndpointFailing(ctx, account, endpoint, now)
	if errors.Is(err, conversations.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if limit := w.disableAfter(); e.Enabled && e.FailingSince != nil && now.Sub(*e.FailingSince) >= limit {
		reason := fmt.Sprintf("no delivery succeeded for %s (since %s)", limit, conversations.FormatTime(*e.FailingSince))
		return w.Store.DisableEndpoint(ctx, account, endpoint, reason, now)
	}
	return false, nil
}

func (w *Service) schedule() []time.Duration {
	if len(w.RetrySchedule) > 0 {
		return w.RetrySchedule
	}
	return DefaultRetrySchedule
}

func (w *Service) disableAfter() time.Duration {
	if w.DisableAfter > 0 {
		return w.DisableAfter
	}
	return DefaultDisableAfter
}

// retryDelay is the wait after the failed attempt number done+1: the
// schedule's, ±20 %, and at least retryAfter (at most MaxRetryAfter).
func (w *Service) retryDelay(done int, retryAfter time.Duration) time.Duration {
	base := w.schedule()[min(done, len(w.schedule())-1)]
	delay := time.Duration(float64(base) * (1 + retryJitter*(2*rand.Float64()-1)))
	if retryAfter > delay {
		delay = min(retryAfter, MaxRetryAfter)
	}
	return delay
}

// OldestPending is the due time of the pending delivery due longest ago
// (nil: none pending): how long deliveries wait for a replica.
func (w *Service) OldestPending(ctx context.Context) (*time.Time, error) {
	return w.Store.OldestPending(ctx)
}

// PurgeDeliveries deletes the deliveries that ended (succeeded or failed)
// and last changed retention or longer before now, never a pending one,
// and the test and retry budgets whose window ended an hour ago (a
// deleted endpoint leaves its own behind). It is run by one replica at a
// time (a lease), but is safe to repeat.
func (w *Service) PurgeDeliveries(ctx context.Context, now time.Time, retention time.Duration) (int64, error) {
	n, err := w.Store.DeleteFinishedDeliveries(ctx, now.UTC().Add(-retention))
	if err != nil {
		return n, err
	}
	q, err := w.Store.DeleteQuotas(ctx, now.UTC().Add(-quotaWindow-time.Hour))
	return n + q, err
}
