package http

import (
	"fmt"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook"
)

// addRoutes is the one list of every route of the API, each with the
// scope a service client's token needs for it; a
// user's token needs none. A token without it gets a token.ScopeError
// (403) before the handler runs.
func addRoutes(e *echo.Echo, d Deps, svc *conversations.Service, hub *conversations.Hub, wh *webhook.Service) {
	bearer := token.Middleware(d.Verifier)
	read := token.RequireScope(token.ScopeConversationsRead)
	write := token.RequireScope(token.ScopeConversationsWrite)

	e.GET("/v1/conversations", handleList(svc, d.Cursors, d.DefaultPageSize, d.MaxPageSize), bearer, read)
	e.POST("/v1/conversations", handleCreate(svc), bearer, write)
	e.GET("/v1/conversations/:id", handleGet(svc), bearer, read)
	e.PATCH("/v1/conversations/:id", handlePatch(svc), bearer, write)
	e.PUT("/v1/conversations/:id/participants/:userId", handleParticipant(svc, true), bearer, write)
	e.DELETE("/v1/conversations/:id/participants/:userId", handleParticipant(svc, false), bearer, write)
	e.POST("/v1/conversations/:id/messages", handlePostMessage(svc), bearer, write)
	e.GET("/v1/conversations/:id/messages", handleListMessages(svc, d.Cursors, d.DefaultPageSize, d.MaxPageSize), bearer, read)
	e.GET("/v1/conversations/:id/messages/:messageId", handleGetMessage(svc), bearer, read)

	e.GET("/v1/events", handleEvents(svc), bearer, read)
	e.GET("/v1/events/stream", handleStream(svc, hub, d.Stream), bearer, read)

	// Webhook endpoints belong to the account: a service client's token
	// with both scopes, never a user's.
	hooks := token.RequireClientScopes(token.ScopeWebhooksManage, token.ScopeConversationsRead)
	e.POST("/v1/webhooks", handleCreateWebhook(wh), bearer, hooks)
	e.GET("/v1/webhooks", handleListWebhooks(wh, d.Cursors, d.DefaultPageSize, d.MaxPageSize), bearer, hooks)
	e.GET("/v1/webhooks/:id", handleGetWebhook(wh), bearer, hooks)
	e.PATCH("/v1/webhooks/:id", handlePatchWebhook(wh), bearer, hooks)
	e.DELETE("/v1/webhooks/:id", handleDeleteWebhook(wh), bearer, hooks)
	e.POST("/v1/webhooks/:id/rotate-secret", handleRotateWebhookSecret(wh), bearer, hooks)
	e.POST("/v1/webhooks/:id/test", handleTestWebhook(wh), bearer, hooks)
	e.GET("/v1/webhooks/:id/deliveries", handleListDeliveries(wh, d.Cursors, d.DefaultPageSize, d.MaxPageSize), bearer, hooks)
	e.POST("/v1/webhooks/:id/deliveries/:deliveryId/retry", handleRetryDelivery(wh), bearer, hooks)

	e.GET("/openapi.yaml", web.OpenAPI(OpenAPI))
}

// caller is who makes the request: the verified token's subject (a user,
// or a service client) in the token's account. The bearer middleware
// guarantees the claims, and the route's scope middleware that a service
// client holds the scope of the route (above). What the caller may see
// is decided by conversations.Caller, not here.
func caller(c *echo.Context) conversations.Caller {
	claims, _ := token.ClaimsFromContext(c.Request().Context())
	return conversations.Caller{AccountID: claims.AccountID, ID: claims.Subject, Client: claims.IsClient()}
}

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
