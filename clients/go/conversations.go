package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The statuses of a conversation.
const (
	StatusOpen    = "open"
	StatusSnoozed = "snoozed"
	StatusClosed  = "closed"
)

// Conversation is a conversation of the caller's account in which the caller
// is a participant.
type Conversation struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
	// Status is StatusOpen, StatusSnoozed or StatusClosed.
	Status string `json:"status"`
	// Participants are user ids (the sub claim of their tokens), the
	// caller's among them.
	Participants []string  `json:"participants"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
	// LastMessageAt is nil when the conversation has no message.
	LastMessageAt *time.Time `json:"lastMessageAt"`
}

// NewConversation holds the writable members of a conversation. Every one is
// optional: the zero value creates an open conversation without a subject
// whose only participant is the caller.
type NewConversation struct {
	Subject string `json:"subject,omitempty"`
	// Status is the initial status; StatusOpen when empty.
	Status string `json:"status,omitempty"`
	// Participants are user ids of the caller's account; the caller is
	// added by the service when missing.
	Participants  []string   `json:"participants,omitempty"`
	LastMessageAt *time.Time `json:"lastMessageAt,omitempty"`
}

// ListOptions filter and size a listing of conversations.
type ListOptions struct {
	// Limit is the page size, 1 to 100; 0 means the service's default (10).
	Limit int
	// Status lists only the conversations with this status; empty means
	// every status.
	Status string
}

// Page is one page of conversations.
type Page struct {
	Conversations []Conversation
	// NextURL is the absolute URL of the next page, "" on the last page.
	// Pass it to ListConversationsPage as is.
	NextURL string
}

func (c *Client) conversationsBase() (*url.URL, error) {
	if c.convURL == nil {
		return nil, errors.New("client: Config.ConversationsURL is not configured")
	}
	return c.convURL, nil
}

// CreateConversation creates a conversation (POST /v1/conversations) and
// returns it as stored.
func (c *Client) CreateConversation(ctx context.Context, nc NewConversation) (Conversation, error) {
	base, err := c.conversationsBase()
	if err != nil {
		return Conversation{}, err
	}
	u, err := endpoint(base, "/v1/conversations")
	if err != nil {
		return Conversation{}, err
	}
	var conv Conversation
	_, err = c.call(ctx, http.MethodPost, u, nc, &conv)
	return conv, err
}

// GetConversation returns one conversation of the caller
// (GET /v1/conversations/{id}); an *Error with code not_found
// (ErrNotFound) when there is none with this id among them.
func (c *Client) GetConversation(ctx context.Context, id string) (Conversation, error) {
	base, err := c.conversationsBase()
	if err != nil {
		return Conversation{}, err
	}
	if id == "" {
		return Conversation{}, errors.New("client: GetConversation: empty id")
	}
	u, err := endpoint(base, "/v1/conversations/"+url.PathEscape(id))
	if err != nil {
		return Conversation{}, err
	}
	var conv Conversation
	_, err = c.call(ctx, http.MethodGet, u, nil, &conv)
	return conv, err
}

// ListConversationsPage returns one page of the caller's conversations
// (GET /v1/conversations), newest activity first. With cursorURL "" it is the
// first page, filtered and sized by opts; otherwise cursorURL is the NextURL
// of the previous page (or the target of its Link header), which is requested
// unchanged: it keeps the limit and status of the first page, and opts is
// ignored.
func (c *Client) ListConversationsPage(ctx context.Context, opts ListOptions, cursorURL string) (Page, error) {
	base, err := c.conversationsBase()
	if err != nil {
		return Page{}, err
	}
	list, err := endpoint(base, "/v1/conversations")
	if err != nil {
		return Page{}, err
	}
	u := list
	if cursorURL == "" {
		q := url.Values{}
		if opts.Limit != 0 {
			q.Set("limit", strconv.Itoa(opts.Limit))
		}
		if opts.Status != "" {
			q.Set("status", opts.Status)
		}
		u.RawQuery = q.Encode()
	} else if u, err = resolveLink(base, list, cursorURL); err != nil {
		return Page{}, err
	}

	var page Page
	h, err := c.call(ctx, http.MethodGet, u, nil, &page.Conversations)
	if err != nil {
		return Page{}, err
	}
	if page.Conversations == nil {
		page.Conversations = []Conversation{}
	}
	next, err := nextLink(h.Values("Link"))
	if err != nil {
		return Page{}, fmt.Errorf("client: GET %s: %w", u.Path, err)
	}
	if next != "" {
		nu, err := resolveLink(base, u, next)
		if err != nil {
			return Page{}, fmt.Errorf("client: GET %s: %w", u.Path, err)
		}
		page.NextURL = nu.String()
	}
	return page, nil
}

// Conversations iterates over every conversation of the caller, newest
// activity first, requesting page after page (of opts.Limit conversations)
// as the loop goes on. A failure is yielded once, with a zero Conversation,
// and ends the iteration; so does leaving the loop, after which no further
// page is requested.
//
//	for conv, err := range c.Conversations(ctx, client.ListOptions{Status: client.StatusOpen}) {
//		if err != nil {
//			return err
//		}
//		...
//	}
func (c *Client) Conversations(ctx context.Context, opts ListOptions) iter.Seq2[Conversation, error] {
	return func(yield func(Conversation, error) bool) {
		next := ""
		seen := map[string]bool{}
		for {
			page, err := c.ListConversationsPage(ctx, opts, next)
			if err != nil {
				yield(Conversation{}, err)
				return
			}
			for _, conv := range page.Conversations {
				if !yield(conv, nil) {
					return
				}
			}
			if page.NextURL == "" {
				return
			}
			if seen[page.NextURL] {
				yield(Conversation{}, fmt.Errorf("client: GET /v1/conversations: the next link repeats an earlier page"))
				return
			}
			seen[page.NextURL] = true
			next = page.NextURL
		}
	}
}

// resolveLink resolves the target of a next link (or a cursor URL given by
// the caller), received in answer to the request for current. A target with
// an absolute path (the service's "/v1/conversations?...") is relative to
// the service, whose root is base (the configured ConversationsURL, which
// may carry a path prefix); a relative path or a query alone is resolved
// against current (RFC 3986); an absolute URL must have the origin of base,
// since the bearer token is sent to it.
func resolveLink(base, current *url.URL, target string) (*url.URL, error) {
	ref, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("invalid next link: %w", err)
	}
	var u *url.URL
	switch {
	case ref.Scheme != "" || ref.Host != "":
		u = current.ResolveReference(ref)
		if !strings.EqualFold(u.Scheme, base.Scheme) || !strings.EqualFold(u.Host, base.Host) {
			return nil, fmt.Errorf("refusing to follow a next link to another origin (%s://%s)", u.Scheme, u.Host)
		}
	case strings.HasPrefix(ref.Path, "/"):
		s := base.String() + ref.EscapedPath()
		if ref.RawQuery != "" {
			s += "?" + ref.RawQuery
		}
		if u, err = url.Parse(s); err != nil {
			return nil, fmt.Errorf("invalid next link: %w", err)
		}
	default:
		u = current.ResolveReference(ref)
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}
