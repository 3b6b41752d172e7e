package mongostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/pkg/tracing"
	"github.com/acme/platform/services/conversations"
)

// Events. A change records its events pending on the
// document it writes (pending_events, with pending_since the time of the
// oldest and pending_slot its account's slot), in that same
// single-document write; the Relay copies them into the events
// collection, the account's log, and clears them. See the package doc for
// the indexes.

// pendingEventDoc is an event recorded on a conversation or a message,
// not yet copied into the log.
type pendingEventDoc struct {
	ID        string    `bson:"id"`
	Type      string    `bson:"type"`
	Timestamp time.Time `bson:"timestamp"`
	Audience  []string  `bson:"audience"`
	Data      string    `bson:"data"` // JSON text, served as it is
	// Trace is the traceparent of the request that recorded it.
	Trace string `bson:"trace,omitempty"`
}

// eventDoc is an event of the log.
type eventDoc struct {
	ID             string    `bson:"_id"`
	AccountID      string    `bson:"account_id"`
	Sequence       int64     `bson:"sequence"`
	Type           string    `bson:"type"`
	Timestamp      time.Time `bson:"timestamp"`
	ConversationID string    `bson:"conversation_id"`
	Audience       []string  `bson:"audience"`
	Data           string    `bson:"data"`
	Trace          string    `bson:"trace,omitempty"`
}

// pendingDocs turns events into what a write records on its document.
func pendingDocs(events []conversations.Event) ([]pendingEventDoc, *time.Time, error) {
	if len(events) == 0 {
		return nil, nil, nil
	}
	docs := make([]pendingEventDoc, len(events))
	since := events[0].Timestamp.UTC()
	for i, e := range events {
		data, err := json.Marshal(e.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("encode event %s: %w", e.ID, err)
		}
		docs[i] = pendingEventDoc{ID: e.ID, Type: string(e.Type), Timestamp: e.Timestamp.UTC(), Audience: e.Audience, Data: string(data), Trace: e.Trace}
		if e.Timestamp.Before(since) {
			since = e.Timestamp.UTC()
		}
	}
	return docs, &since, nil
}

// traced returns events with the trace of the request writing them
// (ctx's span, when it is recorded), which the relay round and the
// webhook attempts of each link to; events as they are otherwise.
func traced(ctx context.Context, events []conversations.Event) []conversations.Event {
	parent := tracing.Parent(ctx)
	if parent == "" || len(events) == 0 {
		return events
	}
	out := slices.Clone(events)
	for i := range out {
		out[i].Trace = parent
	}
	return out
}

// pendingSlot is the pending_slot of a document recording pending: nil
// when there are none.
func pendingSlot(accountID string, pending []pendingEventDoc) *int {
	if len(pending) == 0 {
		return nil
	}
	slot := conversations.PendingSlot(accountID)
	return &slot
}

// pendingHolder is the part of a conversation or message document the
// relay reads.
type pendingHolder struct {
	ID             string            `bson:"_id"`
	AccountID      string            `bson:"account_id"`
	ConversationID string            `bson:"conversation_id"` // messages only
	Version        int64             `bson:"version"`         // conversations only
	PendingEvents  []pendingEventDoc `bson:"pending_events"`
	PendingSince   time.Time         `bson:"pending_since"`
}

// epoch is below every pending_since: {$gt: epoch} selects the documents
// that carry pending events as a range of the by_pending index (a
// document without them has no pending_since, which sorts before dates).
var epoch = time.Unix(0, 0).UTC()

// FindPending implements conversations.EventStore: the oldest documents
// with pending events of both collections stamped before before, of the
// slots asked and those without a slot (recorded before slots existed),
// by their by_pending_slot indexes: one equality range per slot, merged
// in pending_since order by the server (at most PendingSlots + 1 ranges).
func (s *Store) FindPending(ctx context.Context, slots []int, before time.Time, limit int) ([]conversations.Pending, error) {
	if slots == nil {
		slots = make([]int, conversations.PendingSlots)
		for i := range slots {
			slots[i] = i
		}
	}
	in := bson.A{nil}
	for _, slot := range slots {
		in = append(in, slot)
	}
	filter := bson.D{
		{Key: "pending_slot", Value: bson.D{{Key: "$in", Value: in}}},
		{Key: "pending_since", Value: bson.D{{Key: "$gt", Value: epoch}, {Key: "$lt", Value: before}}},
	}
	var out []conversations.Pending
	for _, coll := range []*mongo.Collection{s.conversations, s.messages} {
		cur, err := coll.Find(ctx, filter,
			options.Find().SetSort(bson.D{{Key: "pending_since", Value: 1}}).SetLimit(int64(limit)).SetHint("by_pending_slot").
				SetProjection(bson.D{{Key: "account_id", Value: 1}, {Key: "conversation_id", Value: 1}, {Key: "version", Value: 1},
					{Key: "pending_events", Value: 1}, {Key: "pending_since", Value: 1}}))
		if err != nil {
			return nil, mongoconn.Wrap(err, "find pending events")
		}
		var docs []pendingHolder
		if err := cur.All(ctx, &docs); err != nil {
			return nil, mongoconn.Wrap(err, "find pending events")
		}
		for _, d := range docs {
			p := conversations.Pending{
				Source: conversations.PendingSource{Collection: coll.Name(), ID: d.ID, Version: d.Version},
				Since:  d.PendingSince.UTC(),
			}
			convID := d.ConversationID
			if convID == "" {
				convID = d.ID
			}
			for _, pe := range d.PendingEvents {
				p.Events = append(p.Events, conversations.Event{
					ID: pe.ID, AccountID: d.AccountID, Type: conversations.EventType(pe.Type), Timestamp: pe.Timestamp.UTC(),
					ConversationID: convID, Audience: pe.Audience, RawData: json.RawMessage(pe.Data), Trace: pe.Trace,
				})
			}
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b conversations.Pending) int { return a.Since.Compare(b.Since) })
	return out[:min(len(out), limit)], nil
}

// AppendEvent implements conversations.EventStore: one insert, refused by
// the unique _id (copied already) or by_sequence (number taken).
func (s *Store) AppendEvent(ctx context.Context, e conversations.Event) error {
	data := e.RawData
	if data == nil {
		var err error
		if data, err = json.Marshal(e.Data); err != nil {
			return fmt.Errorf("encode event %s: %w", e.ID, err)
		}
	}
	_, err := s.events.InsertOne(ctx, eventDoc{
		ID: e.ID, AccountID: e.AccountID, Sequence: e.Sequence, Type: string(e.Type), Timestamp: e.Timestamp.UTC(),
		ConversationID: e.ConversationID, Audience: e.Audience, Data: string(data), Trace: e.Trace,
	})
	if !mongo.IsDuplicateKeyError(err) {
		return mongoconn.Wrap(err, "append event")
	}
	// Which index refused it: the message of the error differs between
	// servers, the stored event does not.
	n, err := s.events.CountDocuments(ctx, bson.D{{Key: "_id", Value: e.ID}})
	if err != nil {
		return mongoconn.Wrap(err, "append event")
	}
	if n > 0 {
		return fmt.Errorf("event %s: %w", e.ID, conversations.ErrDuplicateID)
	}
	return fmt.Errorf("event %s of %s at %d: %w", e.ID, e.AccountID, e.Sequence, conversations.ErrSequenceTaken)
}

// ClearPending implements conversations.EventStore: a conversation's
// events are cleared while it is at the version read (a later change may
// have recorded more); a message has one event and no other change.
func (s *Store) ClearPending(ctx context.Context, p conversations.PendingSource) (bool, error) {
	filter := bson.D{{Key: "_id", Value: p.ID}}
	coll := s.messages
	if p.Collection == s.conversations.Name() {
		coll = s.conversations
		filter = append(filter, bson.E{Key: "version", Value: p.Version})
	}
	res, err := coll.UpdateOne(ctx, filter, bson.D{{Key: "$unset", Value: bson.D{
		{Key: "pending_events", Value: ""}, {Key: "pending_since", Value: ""}, {Key: "pending_slot", Value: ""},
	}}})
	if err != nil {
		return false, mongoconn.Wrap(err, "clear pending events")
	}
	return res.MatchedCount == 1, nil
}

// NewestSequence implements conversations.EventStore (by_sequence, read
// backwards).
func (s *Store) NewestSequence(ctx context.Context, accountID string) (int64, error) {
	var d struct {
		Sequence int64 `bson:"sequence"`
	}
	err := s.events.FindOne(ctx, bson.D{{Key: "account_id", Value: accountID}},
		options.FindOne().SetSort(bson.D{{Key: "sequence", Value: -1}}).SetHint("by_sequence").
			SetProjection(bson.D{{Key: "sequence", Value: 1}, {Key: "_id", Value: 0}})).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	if err != nil {
		return 0, mongoconn.Wrap(err, "newest event")
	}
	return d.Sequence, nil
}

// ListEvents implements conversations.EventStore: equality on the
// account (and the audience, the types), then a range of sequences on the
// index that has exactly those fields.
func (s *Store) ListEvents(ctx context.Context, r conversations.EventRange) ([]conversations.Event, error) {
	filter := bson.D{{Key: "account_id", Value: r.AccountID}}
	hint := "by_sequence"
	if r.Audience != "" {
		filter = append(filter, bson.E{Key: "audience", Value: r.Audience})
		hint = "by_audience"
	}
	if len(r.Types) > 0 {
		types := make(bson.A, len(r.Types))
		for i, t := range r.Types {
			types[i] = string(t)
		}
		filter = append(filter, bson.E{Key: "type", Value: bson.D{{Key: "$in", Value: types}}})
		if hint == "by_sequence" {
			hint = "by_type"
		} else {
			hint = "by_audience_type"
		}
	}
	seq := bson.D{{Key: "$gt", Value: r.After}}
	if r.Through > 0 {
		seq = append(seq, bson.E{Key: "$lte", Value: r.Through})
	}
	filter = append(filter, bson.E{Key: "sequence", Value: seq})
	events, err := findAll(ctx, s.events, filter,
		options.Find().SetSort(bson.D{{Key: "sequence", Value: 1}}).SetLimit(int64(r.Limit)).SetHint(hint), eventDoc.domain)
	return events, mongoconn.Wrap(err, "list events")
}

func (d eventDoc) domain() conversations.Event {
	return conversations.Event{
		ID: d.ID, AccountID: d.AccountID, Sequence: d.Sequence, Type: conversations.EventType(d.Type),
		Timestamp: d.Timestamp.UTC(), ConversationID: d.ConversationID, Audience: d.Audience, RawData: json.RawMessage(d.Data),
		Trace: d.Trace,
	}
}

// PurgedThrough implements conversations.EventStore (event_floors by _id).
func (s *Store) PurgedThrough(ctx context.Context, accountID string) (int64, error) {
	var d struct {
		Sequence int64 `bson:"sequence"`
	}
	err := s.eventFloors.FindOne(ctx, bson.D{{Key: "_id", Value: accountID}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	if err != nil {
		return 0, mongoconn.Wrap(err, "purge position")
	}
	return d.Sequence, nil
}

// OldEvents implements conversations.EventStore (by_timestamp).
func (s *Store) OldEvents(ctx context.Context, since, before time.Time, limit int) ([]conversations.Event, error) {
	cur, err := s.events.Find(ctx, bson.D{{Key: "timestamp", Value: bson.D{{Key: "$gte", Value: since.UTC()}, {Key: "$lt", Value: before.UTC()}}}},
		options.Find().SetSort(bson.D{{Key: "timestamp", Value: 1}}).SetLimit(int64(limit)).SetHint("by_timestamp").
			SetProjection(bson.D{{Key: "account_id", Value: 1}, {Key: "sequence", Value: 1}, {Key: "timestamp", Value: 1}}))
	if err != nil {
		return nil, mongoconn.Wrap(err, "old events")
	}
	var docs []eventDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, mongoconn.Wrap(err, "old events")
	}
	events := make([]conversations.Event, len(docs))
	for i, d := range docs {
		events[i] = d.domain()
	}
	return events, nil
}

// RecordPurge implements conversations.EventStore: one upsert that only
// raises the position.
func (s *Store) RecordPurge(ctx context.Context, accountID string, through int64) error {
	_, err := s.eventFloors.UpdateOne(ctx, bson.D{{Key: "_id", Value: accountID}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "sequence", Value: through}}}}, options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		// A concurrent first upsert inserted it: raise it now.
		_, err = s.eventFloors.UpdateOne(ctx, bson.D{{Key: "_id", Value: accountID}},
			bson.D{{Key: "$max", Value: bson.D{{Key: "sequence", Value: through}}}})
	}
	return mongoconn.Wrap(err, "record purge position")
}

// DeleteEventsThrough implements conversations.EventStore (by_sequence).
func (s *Store) DeleteEventsThrough(ctx context.Context, accountID string, through int64) (int64, error) {
	res, err := s.events.DeleteMany(ctx, bson.D{{Key: "account_id", Value: accountID},
		{Key: "sequence", Value: bson.D{{Key: "$lte", Value: through}}}})
	if err != nil {
		return 0, mongoconn.Wrap(err, "purge events")
	}
	return res.DeletedCount, nil
}

// AcquireLease takes or renews the named lease for holder until now+ttl:
// one conditional upsert, won by one replica while the lease runs. A
// holder that stalls past ttl loses it to the next that asks.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	now = now.UTC()
	filter := bson.D{{Key: "_id", Value: name}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "holder", Value: holder}},
		bson.D{{Key: "expires_at", Value: bson.D{{Key: "$lte", Value: now}}}},
	}}}
	_, err := s.leases.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{
		{Key: "holder", Value: holder}, {Key: "expires_at", Value: now.Add(ttl)},
	}}}, options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		// Held by another replica: the upsert tried to insert a second.
		return false, nil
	}
	if err != nil {
		return false, mongoconn.Wrap(err, "acquire lease "+name)
	}
	return true, nil
}
