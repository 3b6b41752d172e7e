package http

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/cursor"
)

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
		body, err := decodeBody(c, conversations.MaxBodyLen, &in)
		if err != nil {
			return err
		}
		m, replayed, err := svc.PostMessageOnce(c.Request().Context(), caller(c), conversationID, in, idempotency(c, body))
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
