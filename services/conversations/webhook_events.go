package conversations

import (
	"context"
	"fmt"
)

// EventLogOf is the account's event log of an EventStore (issue 22) as
// webhooks read it: every event of the account after a sequence, in the
// order the relay numbered them, each delivered as the feed serves it.
func EventLogOf(store EventStore) EventLog { return storeEventLog{store} }

type storeEventLog struct{ store EventStore }

func (l storeEventLog) EventsAfter(ctx context.Context, accountID string, after int64, limit int) ([]WebhookEvent, error) {
	events, err := l.store.ListEvents(ctx, EventRange{AccountID: accountID, After: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]WebhookEvent, 0, len(events))
	for _, e := range events {
		// As the feed writes it: the stored data as it is, not validated
		// again by json.Marshal for every endpoint that reads the event.
		payload, err := e.AppendJSON(nil)
		if err != nil {
			return nil, fmt.Errorf("encode event %s: %w", e.ID, err)
		}
		out = append(out, WebhookEvent{ID: e.ID, Type: string(e.Type), Sequence: e.Sequence, Time: e.Timestamp, Payload: payload, Trace: e.Trace})
	}
	return out, nil
}

func (l storeEventLog) LatestSequence(ctx context.Context, accountID string) (int64, error) {
	return l.store.NewestSequence(ctx, accountID)
}
