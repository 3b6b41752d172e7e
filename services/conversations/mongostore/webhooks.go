package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook"
)

// Webhooks. Collections, documents and indexes:
//
// webhooks: {_id, account_id, url, events[], description, enabled,
// disabled_reason, secrets[{sealed, not_after}], event_cursor,
// failing_since, slot, created_at, updated_at, version}: slot is the
// account's (conversations.PendingSlot), so that a replica's fan-out
// sweep reads the endpoints of its relay's partitions only. Documents
// written before it have no slot (and may hold fanout_at and
// fanout_claim, no longer read).
//
//	by_account        {account_id:1, created_at:-1, _id:-1}
//	    the account's endpoints newest first, keyset-paged; the count
//	    against the limit of 20; the endpoints of the accounts whose
//	    events a relay just ordered (equality on account_id).
//	by_sweep          {enabled:1, slot:1}
//	    the enabled endpoints of the accounts of some slots (and of no
//	    slot): the fan-out's recovery sweep.
//
// webhook_deliveries: {_id, account_id, endpoint_id, event_id, event_type,
// event_time, payload, state, attempts, response_status, duration_ms,
// error, next_attempt_at, claim, created_at, updated_at}
//
//	by_endpoint_event (unique) {endpoint_id:1, event_id:1}
//	    one delivery per (endpoint, event): a fan-out repeated after a
//	    lost lease inserts nothing twice.
//	by_endpoint       {account_id:1, endpoint_id:1, created_at:-1, _id:-1}
//	    the deliveries log of an endpoint, newest first, keyset-paged.
//	by_due            {state:1, next_attempt_at:1}
//	    the pending deliveries of any account due longest ago, a batch of them per
//	    claim (a lease: a claimed delivery's next_attempt_at is its
//	    lease's end, so a crashed replica's claim falls due again); how
//	    overdue the oldest is (a metric).
//	by_finished       {state:1, updated_at:1}
//	    the leased purge of finished deliveries: equality on each
//	    finished state, a range of updated_at older than the retention.
//
// webhook_quotas: {_id: account id/endpoint id/kind, account_id,
// window_start, count}: the test and retry budget of an endpoint, one
// conditional update per request.
//
//	by_window         {window_start:1}
//	    the purge of budgets whose window ended long ago.

type webhookDoc struct {
	ID             string      `bson:"_id"`
	AccountID      string      `bson:"account_id"`
	URL            string      `bson:"url"`
	Events         []string    `bson:"events"`
	Description    string      `bson:"description"`
	Enabled        bool        `bson:"enabled"`
	DisabledReason *string     `bson:"disabled_reason"`
	Secrets        []sealedDoc `bson:"secrets"`
	EventCursor    int64       `bson:"event_cursor"`
	FailingSince   *time.Time  `bson:"failing_since"`
	Slot           *int        `bson:"slot,omitempty"`
	CreatedAt      time.Time   `bson:"created_at"`
	UpdatedAt      time.Time   `bson:"updated_at"`
	Version        int64       `bson:"version"`
}

type sealedDoc struct {
	Sealed   []byte     `bson:"sealed"`
	NotAfter *time.Time `bson:"not_after"`
}

func toWebhookDoc(e webhook.Endpoint) webhookDoc {
	d := webhookDoc{
		ID: e.ID, AccountID: e.AccountID, URL: e.URL, Events: e.Events, Description: e.Description,
		Enabled: e.Enabled, DisabledReason: e.DisabledReason, EventCursor: e.EventCursor,
		FailingSince: utcPtr(e.FailingSince), CreatedAt: e.CreatedAt.UTC(), UpdatedAt: e.UpdatedAt.UTC(), Version: e.Version,
	}
	slot := conversations.PendingSlot(e.AccountID)
	d.Slot = &slot
	for _, s := range e.Secrets {
		d.Secrets = append(d.Secrets, sealedDoc{Sealed: s.Sealed, NotAfter: utcPtr(s.NotAfter)})
	}
	return d
}

func (d webhookDoc) domain() webhook.Endpoint {
	e := webhook.Endpoint{
		ID: d.ID, AccountID: d.AccountID, URL: d.URL, Events: d.Events, Description: d.Description,
		Enabled: d.Enabled, DisabledReason: d.DisabledReason, EventCursor: d.EventCursor,
		FailingSince: utcPtr(d.FailingSince), CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(), Version: d.Version,
	}
	if e.Events == nil {
		e.Events = []string{}
	}
	for _, s := range d.Secrets {
		e.Secrets = append(e.Secrets, webhook.SealedSecret{Sealed: s.Sealed, NotAfter: utcPtr(s.NotAfter)})
	}
	return e
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

type deliveryDoc struct {
	ID             string     `bson:"_id"`
	AccountID      string     `bson:"account_id"`
	EndpointID     string     `bson:"endpoint_id"`
	EventID        string     `bson:"event_id"`
	EventType      string     `bson:"event_type"`
	EventTime      time.Time  `bson:"event_time"`
	Payload        []byte     `bson:"payload"`
	State          string     `bson:"state"`
	Attempts       int        `bson:"attempts"`
	ResponseStatus *int       `bson:"response_status"`
	DurationMs     *int64     `bson:"duration_ms"`
	Error          *string    `bson:"error"`
	NextAttemptAt  *time.Time `bson:"next_attempt_at"`
	Claim          string     `bson:"claim"`
	CreatedAt      time.Time  `bson:"created_at"`
	UpdatedAt      time.Time  `bson:"updated_at"`
	// Trace is the traceparent of the request whose change the event is.
	Trace string `bson:"trace,omitempty"`
}

// toDeliveryDoc is the document of a delivery as InsertDeliveries stores
// it: unclaimed.
func toDeliveryDoc(d webhook.Delivery) deliveryDoc {
	return deliveryDoc{
		ID: d.ID, AccountID: d.AccountID, EndpointID: d.EndpointID, EventID: d.EventID, EventType: d.EventType,
		EventTime: d.EventTime.UTC(), Payload: d.Payload, State: string(d.State), Attempts: d.Attempts,
		NextAttemptAt: utcPtr(d.NextAttemptAt), CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(),
		Trace: d.Trace,
	}
}

func (d deliveryDoc) domain() webhook.Delivery {
	return webhook.Delivery{
		ID: d.ID, AccountID: d.AccountID, EndpointID: d.EndpointID, EventID: d.EventID, EventType: d.EventType,
		EventTime: d.EventTime.UTC(), Payload: d.Payload, State: webhook.DeliveryState(d.State),
		Attempts: d.Attempts, ResponseStatus: d.ResponseStatus, DurationMs: d.DurationMs, Error: d.Error,
		NextAttemptAt: utcPtr(d.NextAttemptAt), CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(), Claim: d.Claim,
		Trace: d.Trace,
	}
}

// webhookIndexes are the indexes of the package doc above.
func (s *Store) webhookIndexes() []struct {
	coll  *mongo.Collection
	model mongo.IndexModel
} {
	return []struct {
		coll  *mongo.Collection
		model mongo.IndexModel
	}{
		{s.webhooks, mongo.IndexModel{
			Keys:    bson.D{{Key: "account_id", Value: 1}, {Key: "created_at", Value: -1}, {Key: "_id", Value: -1}},
			Options: options.Index().SetName("by_account"),
		}},
		{s.webhooks, mongo.IndexModel{
			Keys:    bson.D{{Key: "enabled", Value: 1}, {Key: "slot", Value: 1}},
			Options: options.Index().SetName("by_sweep"),
		}},
		{s.deliveries, mongo.IndexModel{
			Keys:    bson.D{{Key: "endpoint_id", Value: 1}, {Key: "event_id", Value: 1}},
			Options: options.Index().SetName("by_endpoint_event").SetUnique(true),
		}},
		{s.deliveries, mongo.IndexModel{
			Keys: bson.D{{Key: "account_id", Value: 1}, {Key: "endpoint_id", Value: 1},
				{Key: "created_at", Value: -1}, {Key: "_id", Value: -1}},
			Options: options.Index().SetName("by_endpoint"),
		}},
		{s.deliveries, mongo.IndexModel{
			Keys:    bson.D{{Key: "state", Value: 1}, {Key: "next_attempt_at", Value: 1}},
			Options: options.Index().SetName("by_due"),
		}},
		{s.deliveries, mongo.IndexModel{
			Keys:    bson.D{{Key: "state", Value: 1}, {Key: "updated_at", Value: 1}},
			Options: options.Index().SetName("by_finished"),
		}},
		{s.quotas, mongo.IndexModel{
			Keys:    bson.D{{Key: "window_start", Value: 1}},
			Options: options.Index().SetName("by_window"),
		}},
	}
}

func endpointFilter(accountID, id string) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "account_id", Value: accountID}}
}

// InsertEndpoint implements webhook.Store.
func (s *Store) InsertEndpoint(ctx context.Context, e webhook.Endpoint) error {
	_, err := s.webhooks.InsertOne(ctx, toWebhookDoc(e))
	return mongoconn.Wrap(err, "insert webhook endpoint")
}

// CountEndpoints implements webhook.Store.
func (s *Store) CountEndpoints(ctx context.Context, accountID string) (int, error) {
	n, err := s.webhooks.CountDocuments(ctx, bson.D{{Key: "account_id", Value: accountID}},
		options.Count().SetHint("by_account"))
	return int(n), mongoconn.Wrap(err, "count webhook endpoints")
}

func (s *Store) findEndpoint(ctx context.Context, filter bson.D) (webhook.Endpoint, error) {
	var d webhookDoc
	err := s.webhooks.FindOne(ctx, filter).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return webhook.Endpoint{}, webhook.ErrEndpointNotFound
	}
	if err != nil {
		return webhook.Endpoint{}, mongoconn.Wrap(err, "find webhook endpoint")
	}
	return d.domain(), nil
}

// FindEndpoint implements webhook.Store.
func (s *Store) FindEndpoint(ctx context.Context, accountID, id string) (webhook.Endpoint, error) {
	return s.findEndpoint(ctx, endpointFilter(accountID, id))
}

// FindEndpoints implements webhook.Store: one read by _id, each endpoint
// kept only when it is of the account its ref names.
func (s *Store) FindEndpoints(ctx context.Context, refs []webhook.EndpointRef) ([]webhook.Endpoint, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	ids, accounts := make([]string, len(refs)), make([]string, len(refs))
	want := make(map[webhook.EndpointRef]bool, len(refs))
	for i, r := range refs {
		ids[i], accounts[i], want[r] = r.ID, r.AccountID, true
	}
	found, err := findAll(ctx, s.webhooks, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}},
		{Key: "account_id", Value: bson.D{{Key: "$in", Value: accounts}}},
	}, options.Find(), webhookDoc.domain)
	if err != nil {
		return nil, mongoconn.Wrap(err, "find webhook endpoints")
	}
	out := found[:0]
	for _, e := range found {
		if want[webhook.EndpointRef{AccountID: e.AccountID, ID: e.ID}] {
			out = append(out, e)
		}
	}
	return out, nil
}

// ListEndpoints implements webhook.Store.
func (s *Store) ListEndpoints(ctx context.Context, accountID string, limit int, after *conversations.Position) (webhook.EndpointPage, error) {
	items, next, err := findPage(ctx, s.webhooks, bson.D{{Key: "account_id", Value: accountID}}, "created_at", "by_account", after, limit,
		webhookDoc.domain, func(e webhook.Endpoint) conversations.Position {
			return conversations.Position{Time: e.CreatedAt, ID: e.ID}
		})
	if err != nil {
		return webhook.EndpointPage{}, mongoconn.Wrap(err, "list webhook endpoints")
	}
	return webhook.EndpointPage{Endpoints: items, Next: next}, nil
}

// SaveEndpoint implements webhook.Store: one update conditional on the
// version read; a cursor moved by an enable is stored.
func (s *Store) SaveEndpoint(ctx context.Context, e webhook.Endpoint, fromVersion int64) (bool, error) {
	d := toWebhookDoc(e)
	filter := append(endpointFilter(e.AccountID, e.ID), bson.E{Key: "version", Value: fromVersion})
	res, err := s.webhooks.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{
		{Key: "url", Value: d.URL}, {Key: "events", Value: d.Events}, {Key: "description", Value: d.Description},
		{Key: "enabled", Value: d.Enabled}, {Key: "disabled_reason", Value: d.DisabledReason},
		{Key: "secrets", Value: d.Secrets}, {Key: "event_cursor", Value: d.EventCursor},
		{Key: "failing_since", Value: d.FailingSince}, {Key: "updated_at", Value: d.UpdatedAt},
		{Key: "version", Value: d.Version},
	}}})
	if err != nil {
		return false, mongoconn.Wrap(err, "save webhook endpoint")
	}
	return res.MatchedCount == 1, nil
}

// DeleteEndpoint implements webhook.Store.
func (s *Store) DeleteEndpoint(ctx context.Context, accountID, id string) (bool, error) {
	res, err := s.webhooks.DeleteOne(ctx, endpointFilter(accountID, id))
	if err != nil {
		return false, mongoconn.Wrap(err, "delete webhook endpoint")
	}
	return res.DeletedCount == 1, nil
}

// TakeQuota implements webhook.Store: a fixed window per
// endpoint and kind, counted by conditional updates (no transaction): a
// window that ended is restarted by an update conditional on its start,
// a running one counts up while below limit.
func (s *Store) TakeQuota(ctx context.Context, accountID, endpointID, kind string, now time.Time, window time.Duration, limit int) (time.Duration, error) {
	id := accountID + "/" + endpointID + "/" + kind
	byID := bson.D{{Key: "_id", Value: id}, {Key: "account_id", Value: accountID}}
	for range 5 {
		var q struct {
			WindowStart time.Time `bson:"window_start"`
			Count       int       `bson:"count"`
		}
		err := s.quotas.FindOne(ctx, byID).Decode(&q)
		if errors.Is(err, mongo.ErrNoDocuments) {
			_, err = s.quotas.InsertOne(ctx, append(byID, bson.E{Key: "window_start", Value: now}, bson.E{Key: "count", Value: 1}))
			if mongo.IsDuplicateKeyError(err) {
				continue
			}
			return 0, mongoconn.Wrap(err, "take webhook quota")
		}
		if err != nil {
			return 0, mongoconn.Wrap(err, "read webhook quota")
		}
		start := q.WindowStart.UTC()
		if !now.Before(start.Add(window)) {
			res, err := s.quotas.UpdateOne(ctx, append(byID, bson.E{Key: "window_start", Value: start}),
				bson.D{{Key: "$set", Value: bson.D{{Key: "window_start", Value: now}, {Key: "count", Value: 1}}}})
			if err != nil {
				return 0, mongoconn.Wrap(err, "take webhook quota")
			}
			if res.MatchedCount == 1 {
				return 0, nil
			}
			continue
		}
		if q.Count >= limit {
			return start.Add(window).Sub(now), nil
		}
		res, err := s.quotas.UpdateOne(ctx,
			append(byID, bson.E{Key: "window_start", Value: start}, bson.E{Key: "count", Value: bson.D{{Key: "$lt", Value: limit}}}),
			bson.D{{Key: "$inc", Value: bson.D{{Key: "count", Value: 1}}}})
		if err != nil {
			return 0, mongoconn.Wrap(err, "take webhook quota")
		}
		if res.MatchedCount == 1 {
			return 0, nil
		}
	}
	return window, nil
}

// InsertDeliveries implements webhook.Store: an unordered
// insert whose duplicate keys (a delivery stored already) are not errors.
func (s *Store) InsertDeliveries(ctx context.Context, ds []webhook.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	docs := make([]any, 0, len(ds))
	for _, d := range ds {
		docs = append(docs, toDeliveryDoc(d))
	}
	_, err := s.deliveries.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err != nil && onlyDuplicates(err) {
		return nil
	}
	return mongoconn.Wrap(err, "insert webhook deliveries")
}

// onlyDuplicates reports whether every write error of err is a duplicate key.
func onlyDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) {
		if bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
			return false
		}
		for _, we := range bwe.WriteErrors {
			if we.Code != 11000 {
				return false
			}
		}
		return true
	}
	return mongo.IsDuplicateKeyError(err)
}

// ListDeliveries implements webhook.Store.
func (s *Store) ListDeliveries(ctx context.Context, accountID, endpointID string, limit int, after *conversations.Position) (webhook.DeliveryPage, error) {
	filter := bson.D{{Key: "account_id", Value: accountID}, {Key: "endpoint_id", Value: endpointID}}
	items, next, err := findPage(ctx, s.deliveries, filter, "created_at", "by_endpoint", after, limit,
		deliveryDoc.domain, func(d webhook.Delivery) conversations.Position {
			return conversations.Position{Time: d.CreatedAt, ID: d.ID}
		})
	if err != nil {
		return webhook.DeliveryPage{}, mongoconn.Wrap(err, "list webhook deliveries")
	}
	return webhook.DeliveryPage{Deliveries: items, Next: next}, nil
}

// RequeueDelivery implements webhook.Store.
func (s *Store) RequeueDelivery(ctx context.Context, accountID, endpointID, id string, now time.Time) (bool, error) {
	res, err := s.deliveries.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "account_id", Value: accountID}, {Key: "endpoint_id", Value: endpointID}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "state", Value: string(webhook.DeliveryPending)}, {Key: "next_attempt_at", Value: now.UTC()},
			{Key: "claim", Value: ""}, {Key: "updated_at", Value: now.UTC()},
		}}})
	if err != nil {
		return false, mongoconn.Wrap(err, "requeue webhook delivery")
	}
	return res.MatchedCount == 1, nil
}

// DueDeliveries implements webhook.Store: the pending
// range of by_due up to now, oldest due first, in one reply when it fits
// (the server's first batch is otherwise 101 documents, and a larger
// claim cost a getMore).
func (s *Store) DueDeliveries(ctx context.Context, now time.Time, busy []string, limit int) ([]webhook.Delivery, error) {
	filter := bson.D{
		{Key: "state", Value: string(webhook.DeliveryPending)},
		{Key: "next_attempt_at", Value: bson.D{{Key: "$lte", Value: now.UTC()}}},
	}
	if len(busy) > 0 {
		filter = append(filter, bson.E{Key: "endpoint_id", Value: bson.D{{Key: "$nin", Value: busy}}})
	}
	out, err := findAll(ctx, s.deliveries, filter,
		options.Find().SetSort(bson.D{{Key: "next_attempt_at", Value: 1}}).SetHint("by_due").
			SetLimit(int64(limit)).SetBatchSize(int32(limit)), deliveryDoc.domain)
	return out, mongoconn.Wrap(err, "find due webhook deliveries")
}

// ClaimDeliveries implements webhook.Store: one conditional
// update by _id for each delivery, sent together (a single-document
// compare-and-set each: two replicas that read the same deliveries due
// claim each of them once). Only when some were not claimed does it read
// which were.
func (s *Store) ClaimDeliveries(ctx context.Context, ds []webhook.Delivery, now, leaseUntil time.Time, claim string) ([]string, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	models := make([]mongo.WriteModel, len(ds))
	ids, accounts := make([]string, len(ds)), make([]string, len(ds))
	for i, d := range ds {
		ids[i], accounts[i] = d.ID, d.AccountID
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{
				{Key: "_id", Value: d.ID}, {Key: "account_id", Value: d.AccountID}, {Key: "state", Value: string(webhook.DeliveryPending)},
				{Key: "attempts", Value: d.Attempts}, {Key: "next_attempt_at", Value: bson.D{{Key: "$lte", Value: now.UTC()}}},
			}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "claim", Value: claim}, {Key: "next_attempt_at", Value: leaseUntil.UTC()}}}})
	}
	res, err := s.deliveries.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return nil, mongoconn.Wrap(err, "claim webhook deliveries")
	}
	if int(res.MatchedCount) == len(ds) {
		return ids, nil
	}
	claimed, err := findAll(ctx, s.deliveries, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "account_id", Value: bson.D{{Key: "$in", Value: accounts}}},
		{Key: "claim", Value: claim},
	},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}), func(d deliveryDoc) string { return d.ID })
	return claimed, mongoconn.Wrap(err, "read claimed webhook deliveries")
}

// FinishAttempts implements webhook.Store: one conditional
// update by _id for each attempt, sent together. Only when some did not
// match does it read which did: a delivery this call recorded holds no
// claim and carries this outcome's time and attempt count.
func (s *Store) FinishAttempts(ctx context.Context, rs []webhook.AttemptRecord) ([]bool, error) {
	recorded := make([]bool, len(rs))
	if len(rs) == 0 {
		return recorded, nil
	}
	models := make([]mongo.WriteModel, len(rs))
	ids, accounts := make([]string, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		ids[i], accounts[i] = r.ID, r.AccountID
		o := r.Outcome
		duration := o.DurationMs
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{
				{Key: "_id", Value: r.ID}, {Key: "account_id", Value: r.AccountID},
				{Key: "claim", Value: r.Claim}, {Key: "state", Value: string(webhook.DeliveryPending)},
			}).
			SetUpdate(bson.D{
				{Key: "$set", Value: bson.D{
					{Key: "state", Value: string(o.State)}, {Key: "response_status", Value: o.ResponseStatus},
					{Key: "duration_ms", Value: &duration}, {Key: "error", Value: o.Error},
					{Key: "next_attempt_at", Value: utcPtr(o.NextAttemptAt)}, {Key: "claim", Value: ""},
					{Key: "updated_at", Value: o.At.UTC()},
				}},
				{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}},
			})
	}
	res, err := s.deliveries.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return recorded, mongoconn.Wrap(err, "record webhook attempts")
	}
	switch int(res.MatchedCount) {
	case len(rs):
		for i := range recorded {
			recorded[i] = true
		}
		return recorded, nil
	case 0:
		return recorded, nil
	}
	after, err := findAll(ctx, s.deliveries, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "account_id", Value: bson.D{{Key: "$in", Value: accounts}}},
	},
		options.Find().SetProjection(bson.D{{Key: "account_id", Value: 1}, {Key: "claim", Value: 1}, {Key: "attempts", Value: 1}, {Key: "updated_at", Value: 1}}),
		func(d deliveryDoc) deliveryDoc { return d })
	if err != nil {
		return recorded, mongoconn.Wrap(err, "read recorded webhook attempts")
	}
	byID := make(map[string]deliveryDoc, len(after))
	for _, d := range after {
		byID[d.ID] = d
	}
	for i, r := range rs {
		d, ok := byID[r.ID]
		recorded[i] = ok && d.AccountID == r.AccountID && d.Claim == "" && d.Attempts == r.Attempts+1 && d.UpdatedAt.Equal(r.Outcome.At.UTC().Truncate(time.Millisecond))
	}
	return recorded, nil
}

// OldestPending implements webhook.Store: the due time of
// the pending delivery due longest ago, the first entry of by_due's
// pending range (a claimed one's due time is its lease's end).
func (s *Store) OldestPending(ctx context.Context) (*time.Time, error) {
	var d deliveryDoc
	err := s.deliveries.FindOne(ctx, bson.D{{Key: "state", Value: string(webhook.DeliveryPending)}},
		options.FindOne().SetSort(bson.D{{Key: "next_attempt_at", Value: 1}}).SetHint("by_due").
			SetProjection(bson.D{{Key: "next_attempt_at", Value: 1}})).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, mongoconn.Wrap(err, "oldest pending webhook delivery")
	}
	return utcPtr(d.NextAttemptAt), nil
}

// DeleteFinishedDeliveries implements webhook.Store: one
// delete per finished state, each served by by_finished (equality on
// state, a range of updated_at). A pending delivery never matches, and
// one set back to pending meanwhile no longer does.
func (s *Store) DeleteFinishedDeliveries(ctx context.Context, before time.Time) (int64, error) {
	var deleted int64
	for _, state := range []webhook.DeliveryState{webhook.DeliverySucceeded, webhook.DeliveryFailed} {
		res, err := s.deliveries.DeleteMany(ctx, bson.D{
			{Key: "state", Value: string(state)},
			{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: before.UTC()}}},
		})
		if err != nil {
			return deleted, mongoconn.Wrap(err, "purge webhook deliveries")
		}
		deleted += res.DeletedCount
	}
	return deleted, nil
}

// DeleteQuotas implements webhook.Store (by_window). A
// budget deleted is started afresh by the next request, as an ended
// window is.
func (s *Store) DeleteQuotas(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.quotas.DeleteMany(ctx, bson.D{{Key: "window_start", Value: bson.D{{Key: "$lt", Value: before.UTC()}}}})
	if err != nil {
		return 0, mongoconn.Wrap(err, "purge webhook quotas")
	}
	return res.DeletedCount, nil
}

// EndpointsOf implements webhook.Store: one read of
// by_account's equality range per account.
func (s *Store) EndpointsOf(ctx context.Context, accountIDs []string) ([]webhook.Endpoint, error) {
	if len(accountIDs) == 0 {
		return nil, nil
	}
	out, err := findAll(ctx, s.webhooks, bson.D{{Key: "account_id", Value: bson.D{{Key: "$in", Value: accountIDs}}}},
		options.Find().SetHint("by_account"), webhookDoc.domain)
	return out, mongoconn.Wrap(err, "find webhook endpoints of accounts")
}

// EnabledEndpoints implements webhook.Store (by_sweep: one
// equality range per slot, and one for the endpoints stored without).
func (s *Store) EnabledEndpoints(ctx context.Context, slots []int) ([]webhook.Endpoint, error) {
	filter := bson.D{{Key: "enabled", Value: true}}
	if slots != nil {
		in := bson.A{nil}
		for _, slot := range slots {
			in = append(in, slot)
		}
		filter = append(filter, bson.E{Key: "slot", Value: bson.D{{Key: "$in", Value: in}}})
	}
	out, err := findAll(ctx, s.webhooks, filter, options.Find().SetHint("by_sweep"), webhookDoc.domain)
	return out, mongoconn.Wrap(err, "find enabled webhook endpoints")
}

// AdvanceCursors implements webhook.Store: a $max by _id and account
// for each endpoint, sent together.
func (s *Store) AdvanceCursors(ctx context.Context, cursors []webhook.CursorMove) error {
	if len(cursors) == 0 {
		return nil
	}
	models := make([]mongo.WriteModel, 0, len(cursors))
	for _, c := range cursors {
		models = append(models, mongo.NewUpdateOneModel().SetFilter(endpointFilter(c.AccountID, c.EndpointID)).
			SetUpdate(bson.D{{Key: "$max", Value: bson.D{{Key: "event_cursor", Value: c.Cursor}}}}))
	}
	_, err := s.webhooks.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	return mongoconn.Wrap(err, "advance webhook cursors")
}

// MarkEndpointFailing implements webhook.Store.
func (s *Store) MarkEndpointFailing(ctx context.Context, accountID, id string, at time.Time) (webhook.Endpoint, error) {
	if _, err := s.webhooks.UpdateOne(ctx, append(endpointFilter(accountID, id), bson.E{Key: "failing_since", Value: nil}),
		bson.D{{Key: "$set", Value: bson.D{{Key: "failing_since", Value: at.UTC()}}}}); err != nil {
		return webhook.Endpoint{}, mongoconn.Wrap(err, "mark webhook endpoint failing")
	}
	return s.findEndpoint(ctx, endpointFilter(accountID, id))
}

// MarkEndpointHealthy implements webhook.Store; an endpoint
// already healthy is not written.
func (s *Store) MarkEndpointHealthy(ctx context.Context, accountID, id string) error {
	_, err := s.webhooks.UpdateOne(ctx, append(endpointFilter(accountID, id), bson.E{Key: "failing_since", Value: bson.D{{Key: "$ne", Value: nil}}}),
		bson.D{{Key: "$set", Value: bson.D{{Key: "failing_since", Value: nil}}}})
	return mongoconn.Wrap(err, "mark webhook endpoint healthy")
}

// DisableEndpoint implements webhook.Store.
func (s *Store) DisableEndpoint(ctx context.Context, accountID, id, reason string, at time.Time) (bool, error) {
	res, err := s.webhooks.UpdateOne(ctx, append(endpointFilter(accountID, id), bson.E{Key: "enabled", Value: true}),
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "enabled", Value: false}, {Key: "disabled_reason", Value: reason}, {Key: "updated_at", Value: at.UTC()}}},
			{Key: "$inc", Value: bson.D{{Key: "version", Value: 1}}},
		})
	if err != nil {
		return false, mongoconn.Wrap(err, fmt.Sprintf("disable webhook endpoint %s", id))
	}
	return res.ModifiedCount == 1, nil
}
