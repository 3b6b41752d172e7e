package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"time"
)

// Message is a message of a conversation. Messages are immutable.
type Message struct {
	ID             string `json:"id"`
	ConversationID string `json:"conversationId"`
	// Author is the user id (the sub claim) of the user who posted it, or
	// the client id of the service client that did.
	Author string `json:"author"`
	// Body is the text, 1 to 10000 characters.
	Body string `json:"body"`
	// Metadata is a JSON object ({} when none was given), at most 16 KiB,
	// as sent by the author.
	Metadata  json.RawMessage `json:"metadata"`
	CreatedAt time.Time       `json:"createdAt"`
}

// NewMessage is a message to post.
type NewMessage struct {
	// Body is the text, 1 to 10000 characters. Required.
	Body string `json:"body"`
	// Metadata, when not nil, is anything that encodes as a JSON object
	// of at most 16 KiB: a map, a struct, a json.RawMessage.
	Metadata any `json:"metadata,omitempty"`
}

// MessageListOptions size a listing of messages.
type MessageListOptions struct {
	// Limit is the page size, 1 to 100; 0 means the service's default (10).
	Limit int
}

// MessagePage is one page of messages.
type MessagePage struct {
	Messages []Message
	// NextURL is the absolute URL of the next page, "" on the last page.
	// Pass it to ListMessagesPage as is.
	NextURL string
}

// PostMessage posts a message to the conversation
// (POST /v1/conversations/{id}/messages) and returns it as stored; its author
// is the caller. The conversation moves to the top of its participants'
// listings, and a snoozed one reopens; a closed one refuses the message with
// an *Error with the code conversation_closed (ErrConversationClosed).
//
// PostMessage sends an Idempotency-Key, generated unless given with
// WithIdempotencyKey, so a retried request posts one message: the client's
// own retries reuse it, and so must a caller's (see NewIdempotencyKey).
// WithConversation(&conv) keeps conv, and its ETag, current after the
// message.
func (c *Client) PostMessage(ctx context.Context, conversationID string, m NewMessage, opts ...CallOption) (Message, error) {
	o, err := collectOptions("PostMessage", opts, true, false)
	if err != nil {
		return Message{}, err
	}
	u, err := c.conversationsURL("PostMessage", "v1", "conversations", conversationID, "messages")
	if err != nil {
		return Message{}, err
	}
	var msg Message
	if _, err = c.call(ctx, request{method: http.MethodPost, url: u, header: idempotencyHeader(o)}, m, &msg); err != nil {
		return msg, err
	}
	if conv := o.conversation; conv != nil && conv.ETag != "" {
		// See WithConversation: a failed read leaves conv as it was.
		if again, err := c.GetConversation(ctx, conversationID); err == nil {
			*conv = again
		}
	}
	return msg, nil
}

// GetMessage returns one message of the conversation
// (GET /v1/conversations/{id}/messages/{messageId}); an *Error with code
// not_found (ErrNotFound) when there is none with this id.
func (c *Client) GetMessage(ctx context.Context, conversationID, messageID string) (Message, error) {
	u, err := c.conversationsURL("GetMessage", "v1", "conversations", conversationID, "messages", messageID)
	if err != nil {
		return Message{}, err
	}
	var msg Message
	_, err = c.call(ctx, request{method: http.MethodGet, url: u}, nil, &msg)
	return msg, err
}

// ListMessagesPage returns one page of the messages of the conversation
// (GET /v1/conversations/{id}/messages), newest first. With cursorURL "" it
// is the first page, sized by opts; otherwise cursorURL is the NextURL of the
// previous page, requested unchanged (opts is then ignored).
func (c *Client) ListMessagesPage(ctx context.Context, conversationID string, opts MessageListOptions, cursorURL string) (MessagePage, error) {
	list, err := c.conversationsURL("ListMessagesPage", "v1", "conversations", conversationID, "messages")
	if err != nil {
		return MessagePage{}, err
	}
	items, next, err := listPage[Message](ctx, c, c.convURL, list, limitQuery(opts.Limit), cursorURL)
	if err != nil {
		return MessagePage{}, err
	}
	return MessagePage{Messages: items, NextURL: next}, nil
}

// Messages iterates over every message of the conversation, newest first,
// requesting page after page (of opts.Limit messages) by following the Link
// header as the loop goes on. A failure is yielded once, with a zero
// Message, and ends the iteration; so does leaving the loop, after which no
// further page is requested.
func (c *Client) Messages(ctx context.Context, conversationID string, opts MessageListOptions) iter.Seq2[Message, error] {
	return paginate("/v1/conversations/"+url.PathEscape(conversationID)+"/messages", func(next string) ([]Message, string, error) {
		page, err := c.ListMessagesPage(ctx, conversationID, opts, next)
		return page.Messages, page.NextURL, err
	})
}
