package http

import (
	"net/url"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/cursor"
)

// Both listings (conversations, a conversation's messages) page the same
// way: a cursor bound to the listing's scope, and a Link to the next page.

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
