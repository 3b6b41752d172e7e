package mongostore_test

import (
	"testing"

	webhookstoretest "github.com/acme/platform/services/conversations/webhook/storetest"
)

// TestWebhookStore runs the webhooks' conformance suite on the store,
// every query of it checked against the indexes.
func TestWebhookStore(t *testing.T) {
	webhookstoretest.Run(t, func(t *testing.T) webhookstoretest.Store { return newStore(t) })
}
