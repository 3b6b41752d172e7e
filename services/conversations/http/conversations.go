package http

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/cursor"
)

// caller is whose conversations a request sees: the verified token's user
// in the token's account. The bearer middleware guarantees the claims.
func caller(c *echo.Context) (accountID, userID string) {
	claims, _ := token.ClaimsFromContext(c.Request().Context())
	return claims.AccountID, claims.Subject
}

// listParams are the validated query parameters of a list request.
type listParams struct {
	limit  int
	status conversations.Status
	cursor string
}

// parseListParams checks limit, status and cursor strictly: each at most
// once; limit an integer in 1..maxLimit; status one of the contract's.
func parseListParams(q url.Values, defaultLimit, maxLimit int) (listParams, error) {
	p := listParams{limit: defaultLimit}
	var fields []problem.FieldError
	single := func(name string) (string, bool) {
		v, ok := q[name]
		if !ok {
			return "", false
		}
		if len(v) != 1 {
			fields = append(fields, problem.FieldError{Field: name, Reason: "must be given at most once"})
			return "", false
		}
		return v[0], true
	}
	if v, ok := single("limit"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			fields = append(fields, problem.FieldError{Field: "limit", Reason: fmt.Sprintf("must be an integer from 1 to %d", maxLimit)})
		} else {
			p.limit = n
		}
	}
	if v, ok := single("status"); ok {
		if s := conversations.Status(v); s.Valid() {
			p.status = s
		} else {
			fields = append(fields, problem.FieldError{Field: "status", Reason: "must be open, snoozed or closed"})
		}
	}
	if v, ok := single("cursor"); ok {
		p.cursor = v
		if v == "" {
			fields = append(fields, problem.FieldError{Field: "cursor", Reason: "must be a cursor from a next link"})
		}
	}
	if len(fields) > 0 {
		return listParams{}, problem.Validation(fields...)
	}
	return p, nil
}

func handleList(store conversations.Store, cursors *cursor.Codec, defaultLimit, maxLimit int) echo.HandlerFunc {
	return func(c *echo.Context) error {
		p, err := parseListParams(c.QueryParams(), defaultLimit, maxLimit)
		if err != nil {
			return err
		}
		accountID, userID := caller(c)
		scope := cursor.Scope{AccountID: accountID, Participant: userID, Status: string(p.status)}
		q := conversations.ListQuery{AccountID: accountID, Participant: userID, Status: p.status, Limit: p.limit}
		if p.cursor != "" {
			pos, err := cursors.Decode(scope, p.cursor)
			if err != nil {
				return problem.Validation(problem.FieldError{Field: "cursor",
					Reason: "is not a cursor of this listing: use the next link of the previous page"})
			}
			q.After = &pos
		}
		page, err := store.ListConversations(c.Request().Context(), q)
		if err != nil {
			return err
		}
		if page.Next != nil {
			next := url.Values{}
			next.Set("limit", strconv.Itoa(p.limit))
			if p.status != "" {
				next.Set("status", string(p.status))
			}
			next.Set("cursor", cursors.Encode(scope, *page.Next))
			c.Response().Header().Set("Link", `</v1/conversations?`+next.Encode()+`>; rel="next"`)
		}
		return c.JSON(http.StatusOK, page.Conversations)
	}
}

func handleCreate(store conversations.Store) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var in conversations.NewConversation
		if err := web.DecodeJSON(c, conversations.MaxConversationLen, &in); err != nil {
			return err
		}
		accountID, userID := caller(c)
		conv, err := in.Conversation(accountID, userID)
		if err != nil {
			return err
		}
		created, err := store.CreateConversation(c.Request().Context(), conv)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Location", "/v1/conversations/"+created.ID)
		return c.JSON(http.StatusCreated, created)
	}
}

func handleGet(store conversations.Store) echo.HandlerFunc {
	return func(c *echo.Context) error {
		accountID, userID := caller(c)
		conv, err := store.GetConversation(c.Request().Context(), accountID, userID, c.Param("id"))
		if errors.Is(err, conversations.ErrNotFound) {
			return problem.NotFound("No conversation with this id among yours.")
		}
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, conv)
	}
}
