package http

import (
	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
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
