package http

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/cursor"
)

// mergePatchType is the media type of PATCH bodies (RFC 7396).
const mergePatchType = "application/merge-patch+json"

// listParams are the validated query parameters of a list request.
type listParams struct {
	limit        int
	status       conversations.Status
	updatedAfter *time.Time // millisecond precision, UTC
	cursor       string
}

// parseListParams checks limit, status, updatedAfter and cursor strictly:
// each at most once; limit an integer in 1..maxLimit; status one of the
// contract's; updatedAfter an RFC 3339 date-time.
func parseListParams(q url.Values, defaultLimit, maxLimit int) (listParams, error) {
	return parseParams(q, defaultLimit, maxLimit, true)
}

// parseParams parses the parameters of a listing; filters says whether
// status and updatedAfter belong to it (conversations) or are ignored
// like any other unknown parameter (messages).
func parseParams(q url.Values, defaultLimit, maxLimit int, filters bool) (listParams, error) {
	var invalid validation.Collector
	query := web.Query{Values: q, Invalid: &invalid}
	p := listParams{limit: query.Limit(defaultLimit, maxLimit)}
	if filters {
		if v, ok := query.Single("status"); ok {
			if s := conversations.Status(v); s.Valid() {
				p.status = s
			} else {
				invalid.Add("status", "must be open, snoozed or closed")
			}
		}
		if v, ok := query.Single("updatedAfter"); ok {
			if t, err := conversations.ParseTime(v); err == nil {
				p.updatedAfter = &t
			} else {
				invalid.Add("updatedAfter",
					"must be an RFC 3339 date-time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z once in UTC, such as 2024-05-01T12:00:00Z (a + in the offset written %2B)")
			}
		}
	}
	if v, ok := query.Single("cursor"); ok {
		p.cursor = v
		if v == "" {
			invalid.Add("cursor", "must be a cursor from a next link")
		}
	}
	if err := invalid.Err(); err != nil {
		return listParams{}, err
	}
	return p, nil
}

func handleList(svc *conversations.Service, cursors *cursor.Codec, defaultLimit, maxLimit int) echo.HandlerFunc {
	return func(c *echo.Context) error {
		p, err := parseListParams(c.QueryParams(), defaultLimit, maxLimit)
		if err != nil {
			return err
		}
		who := caller(c)
		scope := cursor.Scope{AccountID: who.AccountID, Participant: who.ID, Client: who.Client, Status: string(p.status)}
		if p.updatedAfter != nil {
			scope.UpdatedAfter = strconv.FormatInt(p.updatedAfter.UnixMilli(), 10)
		}
		after, err := pageAfter(cursors, scope, p.cursor)
		if err != nil {
			return err
		}
		page, err := svc.ListConversations(c.Request().Context(), conversations.ListQuery{
			Caller: who, Status: p.status, UpdatedAfter: p.updatedAfter, Limit: p.limit, After: after,
		})
		if err != nil {
			return err
		}
		next := url.Values{}
		next.Set("limit", strconv.Itoa(p.limit))
		if p.status != "" {
			next.Set("status", string(p.status))
		}
		if p.updatedAfter != nil {
			next.Set("updatedAfter", conversations.FormatTime(*p.updatedAfter))
		}
		setNextLink(c, "/v1/conversations", next, cursors, scope, page.Next)
		return c.JSON(http.StatusOK, page.Conversations)
	}
}

func handleCreate(svc *conversations.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var in conversations.NewConversation
		idem, err := web.DecodeJSONIdempotent(c, conversations.MaxConversationLen, &in)
		if err != nil {
			return err
		}
		conv, replayed, err := svc.CreateConversationOnce(c.Request().Context(), caller(c), in, conversations.Idempotency(idem))
		if err != nil {
			return err
		}
		return writeCreated(c, "/v1/conversations/"+conv.ID, etag(conv), conv, replayed)
	}
}

// writeCreated sends the 201 of a POST that created v at location, with
// Idempotent-Replayed: true when v is what the first request with the
// Idempotency-Key created.
func writeCreated(c *echo.Context, location, etag string, v any, replayed bool) error {
	h := c.Response().Header()
	h.Set("Location", location)
	if etag != "" {
		h.Set("ETag", etag)
	}
	if replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	return c.JSON(http.StatusCreated, v)
}

func handleGet(svc *conversations.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathConversationID(c)
		if err != nil {
			return err
		}
		conv, err := svc.GetConversation(c.Request().Context(), caller(c), id)
		if err != nil {
			return err
		}
		c.Response().Header().Set("ETag", etag(conv))
		return c.JSON(http.StatusOK, conv)
	}
}

// handlePatch applies a JSON merge patch (RFC 7396) of subject and status,
// under the If-Match the request carries.
func handlePatch(svc *conversations.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathConversationID(c)
		if err != nil {
			return err
		}
		cond, err := parseIfMatch(c.Request().Header.Values("If-Match"))
		if err != nil {
			return err
		}
		var members map[string]json.RawMessage
		if err := web.DecodeJSONAs(c, mergePatchType, conversations.MaxBodyLen, &members); err != nil {
			return err
		}
		patch, err := conversations.ParsePatch(members)
		if err != nil {
			return err
		}
		conv, err := svc.UpdateConversation(c.Request().Context(), caller(c), id, patch, cond)
		if err != nil {
			return err
		}
		c.Response().Header().Set("ETag", etag(conv))
		return c.JSON(http.StatusOK, conv)
	}
}

// handleParticipant adds (PUT) or removes (DELETE) one participant.
func handleParticipant(svc *conversations.Service, add bool) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathConversationID(c)
		if err != nil {
			return err
		}
		userID, err := pathUserID(c)
		if err != nil {
			return err
		}
		cond, err := parseIfMatch(c.Request().Header.Values("If-Match"))
		if err != nil {
			return err
		}
		change := svc.RemoveParticipant
		if add {
			change = svc.AddParticipant
		}
		conv, err := change(c.Request().Context(), caller(c), id, userID, cond)
		if err != nil {
			return err
		}
		c.Response().Header().Set("ETag", etag(conv))
		return c.NoContent(http.StatusNoContent)
	}
}

func messagesPath(conversationID string) string {
	return "/v1/conversations/" + url.PathEscape(conversationID) + "/messages"
}

func handlePostMessage(svc *conversations.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		conversationID, err := pathConversationID(c)
		if err != nil {
			return err
		}
		var in conversations.NewMessage
		idem, err := web.DecodeJSONIdempotent(c, conversations.MaxBodyLen, &in)
		if err != nil {
			return err
		}
		m, replayed, err := svc.PostMessageOnce(c.Request().Context(), caller(c), conversationID, in, conversations.Idempotency(idem))
		if err != nil {
			return err
		}
		return writeCreated(c, messagesPath(m.ConversationID)+"/"+url.PathEscape(m.ID), "", m, replayed)
	}
}

func handleListMessages(svc *conversations.Service, cursors *cursor.Codec, defaultLimit, maxLimit int) echo.HandlerFunc {
	return func(c *echo.Context) error {
		conversationID, err := pathConversationID(c)
		if err != nil {
			return err
		}
		p, err := parseParams(c.QueryParams(), defaultLimit, maxLimit, false)
		if err != nil {
			return err
		}
		who := caller(c)
		scope := cursor.Scope{AccountID: who.AccountID, Participant: who.ID, Client: who.Client, ConversationID: conversationID}
		after, err := pageAfter(cursors, scope, p.cursor)
		if err != nil {
			return err
		}
		page, err := svc.ListMessages(c.Request().Context(), conversations.MessageQuery{
			Caller: who, ConversationID: conversationID, Limit: p.limit, After: after,
		})
		if err != nil {
			return err
		}
		setNextLink(c, messagesPath(conversationID), url.Values{"limit": {strconv.Itoa(p.limit)}}, cursors, scope, page.Next)
		return c.JSON(http.StatusOK, page.Messages)
	}
}

func handleGetMessage(svc *conversations.Service) echo.HandlerFunc {
	return func(c *echo.Context) error {
		conversationID, err := pathConversationID(c)
		if err != nil {
			return err
		}
		messageID, err := pathMessageID(c)
		if err != nil {
			return err
		}
		m, err := svc.GetMessage(c.Request().Context(), caller(c), conversationID, messageID)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, m)
	}
}

// Every listing pages the same way: a cursor bound to the listing's
// scope, and a Link to the next page.

const badCursor = "is not a cursor of this listing: use the next link of the previous page"

// pageAfter decodes a listing request's cursor, if any: the position the
// page continues after.
func pageAfter(cursors *cursor.Codec, scope cursor.Scope, raw string) (*conversations.Position, error) {
	if raw == "" {
		return nil, nil
	}
	pos, err := cursors.Decode(scope, raw)
	if err != nil {
		return nil, validation.Invalid("cursor", badCursor)
	}
	return &pos, nil
}

// setNextLink sets the Link header of a page that has a next one: path
// with the listing's parameters and the cursor of the page's last item.
func setNextLink(c *echo.Context, path string, params url.Values, cursors *cursor.Codec, scope cursor.Scope, next *conversations.Position) {
	if next == nil {
		return
	}
	params.Set("cursor", cursors.Encode(scope, *next))
	c.Response().Header().Set("Link", `<`+path+`?`+params.Encode()+`>; rel="next"`)
}
