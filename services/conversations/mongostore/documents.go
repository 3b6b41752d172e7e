package mongostore

import (
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook"
)

// Documents as the collections hold them, for programs that read or write
// the collections with the driver beside the service (deploy/bench
// measures the service against the same commands): one definition, so
// that theirs cannot drift from the store's.
type (
	ConversationDocument = conversationDoc
	MessageDocument      = messageDoc
	EventDocument        = eventDoc
	DeliveryDocument     = deliveryDoc
)

// ConversationOf is the conversation d holds.
func ConversationOf(d ConversationDocument) conversations.Conversation { return d.domain() }

// NewDeliveryDocument is the document InsertDeliveries stores for d.
func NewDeliveryDocument(d webhook.Delivery) DeliveryDocument { return toDeliveryDoc(d) }

// NewMessageDocument is the document InsertMessage stores for m with the
// events its insert records.
func NewMessageDocument(m conversations.Message, events ...conversations.Event) (MessageDocument, error) {
	return newMessageDoc(m, events)
}
