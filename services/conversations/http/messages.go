package http

import (
	"encoding/json"
	"fmt"
	"log/slog"
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

func handlePostMessage(store conversations.Store, logger *slog.Logger) echo.HandlerFunc {
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
		who := caller(c)
		msg, err := in.Message(who, conversationID)
		if err != nil {
			return err
		}
		return idempotent(c, store, logger, who, body, conversations.NewMessageID, func(id string) (created, error) {
			msg.ID = id
			stored, err := store.PostMessage(c.Request().Context(), who, msg)
			if err != nil {
				return created{}, storeProblem(err)
			}
			b, err := json.Marshal(stored)
			if err != nil {
				return created{}, fmt.Errorf("encode message: %w", err)
			}
			return created{location: messagesPath(stored.ConversationID) + "/" + url.PathEscape(stored.ID), body: b}, nil
		})
	}
}

func handleListMessages(store conversations.MessageStore, cursors *cursor.Codec, defaultLimit, maxLimit int) echo.HandlerFunc {
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
		page, err := store.ListMessages(c.Request().Context(), conversations.MessageQuery{
			Caller: who, ConversationID: conversationID, Limit: p.limit, After: after,
		})
		if err != nil {
			return storeProblem(err)
		}
		setNextLink(c, messagesPath(conversationID), url.Values{"limit": {strconv.Itoa(p.limit)}}, cursors, scope, page.Next)
		return c.JSON(http.StatusOK, page.Messages)
	}
}

func handleGetMessage(store conversations.MessageStore) echo.HandlerFunc {
	return func(c *echo.Context) error {
		conversationID, err := pathConversationID(c)
		if err != nil {
			return err
		}
		messageID, err := pathMessageID(c)
		if err != nil {
			return err
		}
		m, err := store.GetMessage(c.Request().Context(), caller(c), conversationID, messageID)
		if err != nil {
			return storeProblem(err)
		}
		return c.JSON(http.StatusOK, m)
	}
}
