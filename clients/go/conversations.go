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

// Conversation is a conversation of the caller's account: one in which the
// user is a participant, or any conversation of the account for a service
// client with the scope conversations:read.
type Conversation struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
	// Status is StatusOpen, StatusSnoozed or StatusClosed.
	Status string `json:"status"`
	// Participants are user ids (the sub claim of their tokens).
	Participants []string  `json:"participants"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
	// LastMessageAt is nil when the conversation has no message.
	LastMessageAt *time.Time `json:"lastMessageAt"`

	// ETag is the entity tag of the response the conversation was read
	// from (CreateConversation, GetConversation, PatchConversation), ""
	// for one from a listing, whose items carry none. PatchConversation
	// sends it as If-Match, so that a change made by someone else since
	// this value was read is not silently overwritten.
	ETag string `json:"-"`
}

// NewConversation holds the writable members of a conversation. Every one is
// optional: the zero value creates an open conversation without a subject
// whose only participant is the caller (a service client must name the
// participants).
type NewConversation struct {
	Subject string `json:"subject,omitempty"`
	// Status is the initial status; StatusOpen when empty.
	Status string `json:"status,omitempty"`
	// Participants are user ids of the caller's account; a user caller is
	// added by the service when missing.
	Participants  []string   `json:"participants,omitempty"`
	LastMessageAt *time.Time `json:"lastMessageAt,omitempty"`
}

// ConversationPatch is a change of a conversation (a JSON merge patch, RFC
// 7396): the members set are changed, the others kept.
type ConversationPatch struct {
	// Subject, when not nil, is the new subject; a pointer to "" clears
	// it.
	Subject *string `json:"subject,omitempty"`
	// Status, when not empty, is the new status: StatusOpen, StatusSnoozed
	// or StatusClosed.
	Status string `json:"status,omitempty"`
}

// ListOptions filter and size a listing of conversations.
type ListOptions struct {
	// Limit is the page size, 1 to 100; 0 means the service's default (10).
	Limit int
	// Status lists only the conversations with this status; empty means
	// every status.
	Status string
	// UpdatedAfter, when not zero, lists only the conversations changed
	// (updatedAt) after this instant: to sync changes, pass the UpdatedAt
	// of the newest conversation seen so far.
	UpdatedAfter time.Time
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

// conversationsURL is the URL of the conversations service with the path
// built from escaped segments: conversationsURL("v1", "conversations", id).
func (c *Client) conversationsURL(op string, segments ...string) (*url.URL, error) {
	base, err := c.conversationsBase()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, s := range segments {
		if s == "" {
			return nil, fmt.Errorf("client: %s: empty id", op)
		}
		b.WriteString("/")
		b.WriteString(url.PathEscape(s))
	}
	return endpoint(base, b.String())
}

// idempotencyHeader is the Idempotency-Key header of a create call: the
// caller's key, or a new one. It is chosen once per call, so the client's
// own retry (after a 401, or the transport's replay on a dead connection)
// sends the same key and cannot create twice.
func idempotencyHeader(o callOptions) http.Header {
	key := o.idempotencyKey
	if !o.hasKey {
		key = NewIdempotencyKey()
	}
	return http.Header{"Idempotency-Key": {key}}
}

// CreateConversation creates a conversation (POST /v1/conversations) and
// returns it as stored. It sends an Idempotency-Key, generated unless given
// with WithIdempotencyKey, so a retried request creates one conversation.
func (c *Client) CreateConversation(ctx context.Context, nc NewConversation, opts ...CallOption) (Conversation, error) {
	o, err := collectOptions("CreateConversation", opts, true, false)
	if err != nil {
		return Conversation{}, err
	}
	u, err := c.conversationsURL("CreateConversation", "v1", "conversations")
	if err != nil {
		return Conversation{}, err
	}
	return c.conversation(ctx, request{method: http.MethodPost, url: u, header: idempotencyHeader(o)}, nc)
}

// GetConversation returns one conversation of the caller
// (GET /v1/conversations/{id}), with its ETag; an *Error with code not_found
// (ErrNotFound) when there is none with this id among them.
func (c *Client) GetConversation(ctx context.Context, id string) (Conversation, error) {
	u, err := c.conversationsURL("GetConversation", "v1", "conversations", id)
	if err != nil {
		return Conversation{}, err
	}
	return c.conversation(ctx, request{method: http.MethodGet, url: u}, nil)
}

// PatchConversation changes the subject or the status of conv
// (PATCH /v1/conversations/{conv.ID}, application/merge-patch+json) on
// condition that it is unchanged since conv was read: it sends conv.ETag as
// If-Match. It returns the conversation as changed, with its new ETag. When
// someone changed the conversation in the meantime (a message, a participant
// or another PATCH), the service changes nothing and the error is an *Error
// with the status 412 and the code precondition_failed
// (errors.Is(err, ErrPreconditionFailed)): get the conversation again, decide
// again, and patch the fresh value.
//
// conv must carry an ETag: a conversation from a listing has none, so get it
// with GetConversation first. (An ETag of "*" matches any state: the change
// then overwrites whatever is there, which is rarely what an editor wants.)
func (c *Client) PatchConversation(ctx context.Context, conv Conversation, patch ConversationPatch) (Conversation, error) {
	if conv.ETag == "" {
		return Conversation{}, errors.New("client: PatchConversation: the conversation has no ETag (listings carry none): get it with GetConversation first")
	}
	if err := checkETag(conv.ETag); err != nil {
		return Conversation{}, fmt.Errorf("client: PatchConversation: %w", err)
	}
	u, err := c.conversationsURL("PatchConversation", "v1", "conversations", conv.ID)
	if err != nil {
		return Conversation{}, err
	}
	return c.conversation(ctx, request{
		method: http.MethodPatch, url: u, contentType: "application/merge-patch+json",
		header: http.Header{"If-Match": {conv.ETag}},
	}, patch)
}

// conversation sends r (with in as its body) and reads the conversation and
// its ETag from the response.
func (c *Client) conversation(ctx context.Context, r request, in any) (Conversation, error) {
	var conv Conversation
	h, err := c.call(ctx, r, in, &conv)
	if err != nil {
		return Conversation{}, err
	}
	conv.ETag = h.Get("ETag")
	return conv, nil
}

// AddParticipant adds the user userID to the conversation
// (PUT /v1/conversations/{id}/participants/{userId}); adding a participant
// again changes nothing. A conversation holds at most 100 participants: the
// 101st is an *Error with the code too_many_participants
// (ErrTooManyParticipants). It returns the conversation's entity tag after
// the call: a change gives it a new one, so a Conversation value held for a
// later PatchConversation needs it (conv.ETag = etag). WithIfMatch makes the
// change conditional.
func (c *Client) AddParticipant(ctx context.Context, conversationID, userID string, opts ...CallOption) (etag string, err error) {
	return c.participant(ctx, "AddParticipant", http.MethodPut, conversationID, userID, opts)
}

// RemoveParticipant removes the user userID from the conversation
// (DELETE /v1/conversations/{id}/participants/{userId}); a user may remove
// themselves (leave), and removing one who is no participant changes
// nothing. Removing the last participant is an *Error with the code
// last_participant (ErrLastParticipant). It returns the conversation's entity
// tag after the call, like AddParticipant. WithIfMatch makes the change
// conditional.
func (c *Client) RemoveParticipant(ctx context.Context, conversationID, userID string, opts ...CallOption) (etag string, err error) {
	return c.participant(ctx, "RemoveParticipant", http.MethodDelete, conversationID, userID, opts)
}

func (c *Client) participant(ctx context.Context, op, method, conversationID, userID string, opts []CallOption) (string, error) {
	o, err := collectOptions(op, opts, false, true)
	if err != nil {
		return "", err
	}
	u, err := c.conversationsURL(op, "v1", "conversations", conversationID, "participants", userID)
	if err != nil {
		return "", err
	}
	r := request{method: method, url: u}
	if o.hasIfMatch {
		r.header = http.Header{"If-Match": {o.ifMatch}}
	}
	h, err := c.call(ctx, r, nil, nil)
	if err != nil {
		return "", err
	}
	return h.Get("ETag"), nil
}

// ListConversationsPage returns one page of the caller's conversations
// (GET /v1/conversations), newest activity first. With cursorURL "" it is the
// first page, filtered and sized by opts; otherwise cursorURL is the NextURL
// of the previous page (or the target of its Link header), which is requested
// unchanged: it keeps the limit and filters of the first page, and opts is
// ignored.
func (c *Client) ListConversationsPage(ctx context.Context, opts ListOptions, cursorURL string) (Page, error) {
	list, err := c.conversationsURL("ListConversationsPage", "v1", "conversations")
	if err != nil {
		return Page{}, err
	}
	q := limitQuery(opts.Limit)
	if opts.Status != "" {
		q.Set("status", opts.Status)
	}
	if !opts.UpdatedAfter.IsZero() {
		q.Set("updatedAfter", opts.UpdatedAfter.UTC().Format(time.RFC3339Nano))
	}
	items, next, err := listPage[Conversation](ctx, c, c.convURL, list, q, cursorURL)
	if err != nil {
		return Page{}, err
	}
	return Page{Conversations: items, NextURL: next}, nil
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
	return paginate("/v1/conversations", func(next string) ([]Conversation, string, error) {
		page, err := c.ListConversationsPage(ctx, opts, next)
		return page.Conversations, page.NextURL, err
	})
}

// listPage requests one page of the listing at list, of the service whose
// root is base: with query when cursorURL is "", at cursorURL otherwise. It
// returns the page's items (never nil) and the absolute URL of the next
// page ("" on the last).
func listPage[T any](ctx context.Context, c *Client, base, list *url.URL, query url.Values, cursorURL string) ([]T, string, error) {
	var err error
	u := list
	if cursorURL == "" {
		u.RawQuery = query.Encode()
	} else if u, err = resolveLink(base, list, cursorURL); err != nil {
		return nil, "", err
	}
	var items []T
	h, err := c.call(ctx, request{method: http.MethodGet, url: u}, nil, &items)
	if err != nil {
		return nil, "", err
	}
	if items == nil {
		items = []T{}
	}
	next, err := nextLink(h.Values("Link"))
	if err != nil {
		return nil, "", fmt.Errorf("client: GET %s: %w", u.Path, err)
	}
	if next == "" {
		return items, "", nil
	}
	nu, err := resolveLink(base, u, next)
	if err != nil {
		return nil, "", fmt.Errorf("client: GET %s: %w", u.Path, err)
	}
	return items, nu.String(), nil
}

// limitQuery is the query of a listing's first page of limit items (0: the
// service's default).
func limitQuery(limit int) url.Values {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}

// paginate iterates over the items of the pages that page returns, from the
// first (next "") to the one without a next URL. A failure is yielded once
// and ends the iteration, as does a next URL that repeats an earlier one.
func paginate[T any](path string, page func(next string) ([]T, string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		next := ""
		seen := map[string]bool{}
		for {
			items, nextURL, err := page(next)
			if err != nil {
				yield(zero, err)
				return
			}
			for _, item := range items {
				if !yield(item, nil) {
					return
				}
			}
			if nextURL == "" {
				return
			}
			if seen[nextURL] {
				yield(zero, fmt.Errorf("client: GET %s: the next link repeats an earlier page", path))
				return
			}
			seen[nextURL] = true
			next = nextURL
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
