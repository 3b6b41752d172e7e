package mongostore_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook"

	webhookstoretest "github.com/acme/platform/services/conversations/webhook/storetest"
)

// TestWebhookStore runs the webhooks' conformance suite on the store,
// every query of it checked against the indexes.
func TestWebhookStore(t *testing.T) {
	webhookstoretest.Run(t, func(t *testing.T) webhookstoretest.Store { return newStore(t) })
}

// TestSweepFindsEndpointsStoredWithoutSlot: an endpoint stored before
// endpoints carried their account's slot is found by the sweep of the
// slot its account has.
func TestSweepFindsEndpointsStoredWithoutSlot(t *testing.T) {
	ctx := context.Background()
	db, store := newStoreOn(t)
	e := webhook.Endpoint{
		ID: webhook.NewEndpointID(), AccountID: "acc_before_slots", URL: "https://hooks.example.com/in",
		Events: []string{webhook.EventTypeAll}, Enabled: true, Version: 1,
	}
	if err := store.InsertEndpoint(ctx, e); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("webhooks").UpdateOne(ctx, bson.D{{Key: "_id", Value: e.ID}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "slot", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	got, err := store.EnabledEndpoints(ctx, []int{conversations.PendingSlot(e.AccountID)})
	if err != nil || len(got) != 1 || got[0].ID != e.ID {
		t.Fatalf("the sweep of its slot: %+v %v", got, err)
	}
}
