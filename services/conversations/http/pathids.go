package http

import (
	"fmt"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook"
)

// The ids of a path are checked against their form before anything else
// (conversations.ValidConversationID and the others): an id of another
// form names nothing that exists, so it is a 404 like an unknown one, and
// never reaches the store. A user id is a 400 naming it: it names someone
// to add or remove, not a resource of the path.

// pathConversationID is the {id} of the path: ErrNotFound unless it has
// the form of a conversation id.
func pathConversationID(c *echo.Context) (string, error) {
	id := c.Param("id")
	if !conversations.ValidConversationID(id) {
		return "", fmt.Errorf("conversation id of another form: %w", conversations.ErrNotFound)
	}
	return id, nil
}

// pathMessageID is the {messageId} of the path: ErrMessageNotFound unless
// it has the form of a message id.
func pathMessageID(c *echo.Context) (string, error) {
	id := c.Param("messageId")
	if !conversations.ValidMessageID(id) {
		return "", fmt.Errorf("message id of another form: %w", conversations.ErrMessageNotFound)
	}
	return id, nil
}

// pathEndpointID is the {id} of a webhook path: ErrEndpointNotFound unless
// it has the form of an endpoint id.
func pathEndpointID(c *echo.Context) (string, error) {
	id := c.Param("id")
	if !webhook.ValidEndpointID(id) {
		return "", fmt.Errorf("endpoint id of another form: %w", webhook.ErrEndpointNotFound)
	}
	return id, nil
}

// pathDeliveryID is the {deliveryId} of the path: ErrDeliveryNotFound
// unless it has the form of a delivery id.
func pathDeliveryID(c *echo.Context) (string, error) {
	id := c.Param("deliveryId")
	if !webhook.ValidDeliveryID(id) {
		return "", fmt.Errorf("delivery id of another form: %w", webhook.ErrDeliveryNotFound)
	}
	return id, nil
}

// pathUserID is the {userId} of the path: a validation problem unless it
// has the form of a user id.
func pathUserID(c *echo.Context) (string, error) {
	id := c.Param("userId")
	if !conversations.ValidUserID(id) {
		return "", validation.Invalid("userId", conversations.UserIDForm)
	}
	return id, nil
}
