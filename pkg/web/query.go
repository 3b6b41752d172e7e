package web

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/acme/platform/pkg/validation"
)

// Query reads a request's query parameters strictly, collecting every
// mistake in Invalid, so that a listing answers one 400 naming each
// offending parameter.
type Query struct {
	Values  url.Values
	Invalid *validation.Collector
}

// Single returns the value of the parameter name and whether it was given;
// given more than once, it is invalid.
func (q Query) Single(name string) (string, bool) {
	v, ok := q.Values[name]
	if !ok {
		return "", false
	}
	if len(v) != 1 {
		q.Invalid.Add(name, "must be given at most once")
		return "", false
	}
	return v[0], true
}

// Limit returns the limit parameter, an integer in 1..maxLimit, or def when
// it is not given (or invalid, which Invalid records).
func (q Query) Limit(def, maxLimit int) int {
	v, ok := q.Single("limit")
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxLimit {
		q.Invalid.Add("limit", fmt.Sprintf("must be an integer from 1 to %d", maxLimit))
		return def
	}
	return n
}
