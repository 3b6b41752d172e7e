package http

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/cursor"
	"github.com/acme/platform/services/conversations/webhook"
)

// Webhook endpoints, for service clients with
// webhooks:manage and conversations:read (routes.go).

// createdEndpoint is the 201 body: the endpoint and, this once, its secret.
type createdEndpoint struct {
	webhook.Endpoint
	Secret string `json:"secret"`
}

func (c createdEndpoint) MarshalJSON() ([]byte, error) {
	base, err := json.Marshal(c.Endpoint)
	if err != nil {
		return nil, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(base, &members); err != nil {
		return nil, err
	}
	secret, _ := json.Marshal(c.Secret)
	members["secret"] = secret
	return json.Marshal(members)
}

func handleCreateWebhook(wh *webhook.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var in webhook.NewEndpoint
		if err := web.DecodeJSON(c, conversations.MaxBodyLen, &in); err != nil {
			return err
		}
		e, secret, err := wh.CreateEndpoint(c.Request().Context(), caller(c), in)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Location", "/v1/webhooks/"+e.ID)
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusCreated, createdEndpoint{Endpoint: e, Secret: secret})
	}
}

func handleListWebhooks(wh *webhook.Service, cursors *cursor.Codec, defaultLimit, maxLimit int) echo.HandlerFunc {
	return func(c *echo.Context) error {
		p, err := parseParams(c.QueryParams(), defaultLimit, maxLimit, false)
		if err != nil {
			return err
		}
		who := caller(c)
		scope := cursor.Scope{AccountID: who.AccountID, Participant: who.ID, Client: who.Client, Listing: "webhooks"}
		after, err := pageAfter(cursors, scope, p.cursor)
		if err != nil {
			return err
		}
		page, err := wh.ListEndpoints(c.Request().Context(), who, p.limit, after)
		if err != nil {
			return err
		}
		setNextLink(c, "/v1/webhooks", url.Values{"limit": {strconv.Itoa(p.limit)}}, cursors, scope, page.Next)
		return c.JSON(http.StatusOK, page.Endpoints)
	}
}

func handleGetWebhook(wh *webhook.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathEndpointID(c)
		if err != nil {
			return err
		}
		e, err := wh.GetEndpoint(c.Request().Context(), caller(c), id)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, e)
	}
}

func handlePatchWebhook(wh *webhook.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathEndpointID(c)
		if err != nil {
			return err
		}
		var members map[string]json.RawMessage
		if err := web.DecodeJSONAs(c, mergePatchType, conversations.MaxBodyLen, &members); err != nil {
			return err
		}
		patch, err := webhook.ParsePatch(members, wh.URLs)
		if err != nil {
			return err
		}
		e, err := wh.UpdateEndpoint(c.Request().Context(), caller(c), id, patch)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, e)
	}
}

func handleDeleteWebhook(wh *webhook.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathEndpointID(c)
		if err != nil {
			return err
		}
		if err := wh.DeleteEndpoint(c.Request().Context(), caller(c), id); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

func handleRotateWebhookSecret(wh *webhook.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathEndpointID(c)
		if err != nil {
			return err
		}
		var in webhook.Rotation
		if c.Request().ContentLength != 0 {
			if err := web.DecodeJSON(c, conversations.MaxBodyLen, &in); err != nil {
				return err
			}
		}
		secret, err := wh.RotateSecret(c.Request().Context(), caller(c), id, in)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusOK, map[string]string{"secret": secret})
	}
}

func handleTestWebhook(wh *webhook.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathEndpointID(c)
		if err != nil {
			return err
		}
		d, err := wh.SendTest(c.Request().Context(), caller(c), id)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusAccepted, d)
	}
}

func handleListDeliveries(wh *webhook.Service, cursors *cursor.Codec, defaultLimit, maxLimit int) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathEndpointID(c)
		if err != nil {
			return err
		}
		p, err := parseParams(c.QueryParams(), defaultLimit, maxLimit, false)
		if err != nil {
			return err
		}
		who := caller(c)
		scope := cursor.Scope{AccountID: who.AccountID, Participant: who.ID, Client: who.Client, Listing: "webhook-deliveries", ParentID: id}
		after, err := pageAfter(cursors, scope, p.cursor)
		if err != nil {
			return err
		}
		page, err := wh.ListDeliveries(c.Request().Context(), who, id, p.limit, after)
		if err != nil {
			return err
		}
		setNextLink(c, "/v1/webhooks/"+id+"/deliveries", url.Values{"limit": {strconv.Itoa(p.limit)}}, cursors, scope, page.Next)
		return c.JSON(http.StatusOK, page.Deliveries)
	}
}

func handleRetryDelivery(wh *webhook.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathEndpointID(c)
		if err != nil {
			return err
		}
		deliveryID, err := pathDeliveryID(c)
		if err != nil {
			return err
		}
		if err := wh.RetryDelivery(c.Request().Context(), caller(c), id, deliveryID); err != nil {
			return err
		}
		return c.NoContent(http.StatusAccepted)
	}
}
