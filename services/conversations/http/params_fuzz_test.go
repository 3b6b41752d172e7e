package http

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/services/conversations"
)

// FuzzListParams parses arbitrary raw query strings as the list handler
// does (url.ParseQuery, which keeps the well-formed pairs, as
// echo's QueryParams does) with parseListParams. The error is nil or a 400
// validation_failed *problem.Problem naming limit, status or cursor; a
// success has a limit within 1..max (the default when absent), a valid or
// empty status, and the given cursor.
func FuzzListParams(f *testing.F) {
	for _, seed := range []string{
		"", "limit=10", "limit=1", "limit=100", "limit=101", "limit=0", "limit=-1", "limit=+5",
		"limit=1e2", "limit=0x10", "limit=9223372036854775808", "limit= 5", "limit=5&limit=5",
		"status=open", "status=snoozed", "status=closed", "status=OPEN", "status=", "status=open&status=closed",
		"cursor=abc", "cursor=", "cursor=a&cursor=b", "limit=2&status=open&cursor=AQID",
		"limit=%31%30", "limit=%zz", "%", "&&&", "=", "limit", "status", "cursor", ";limit=5",
		"limit=5;status=open", "unknown=1&limit=3", "limit=３",
	} {
		f.Add(seed, uint8(99))
	}
	f.Add("limit=7", uint8(4))

	f.Fuzz(func(t *testing.T, raw string, maxSel uint8) {
		maxLimit := int(maxSel)%100 + 1 // 1..100, the configured maximum
		defaultLimit := min(10, maxLimit)
		q, _ := url.ParseQuery(raw) // a malformed pair is dropped, as by echo
		p, err := parseListParams(q, defaultLimit, maxLimit)
		if err != nil {
			var pr *problem.Problem
			if !errors.As(err, &pr) || error(pr) != err {
				t.Fatalf("query %q: error %v (%T) is not a *problem.Problem", raw, err, err)
			}
			if pr.Status != http.StatusBadRequest || pr.Code != problem.CodeValidationFailed || len(pr.Errors) == 0 {
				t.Fatalf("query %q: problem %+v, want a 400 validation_failed with fields", raw, pr)
			}
			for _, fe := range pr.Errors {
				if !slices.Contains([]string{"limit", "status", "cursor"}, fe.Field) || fe.Reason == "" {
					t.Fatalf("query %q: field error %+v", raw, fe)
				}
			}
			if p != (listParams{}) {
				t.Fatalf("query %q: parameters %+v returned with an error", raw, p)
			}
			return
		}
		if p.limit < 1 || p.limit > maxLimit {
			t.Fatalf("query %q: limit %d outside 1..%d", raw, p.limit, maxLimit)
		}
		if _, given := q["limit"]; !given && p.limit != defaultLimit {
			t.Fatalf("query %q: limit %d without a limit parameter, want the default %d", raw, p.limit, defaultLimit)
		}
		if p.status != "" && !p.status.Valid() {
			t.Fatalf("query %q: invalid status %q accepted", raw, p.status)
		}
		if s, given := q["status"]; given && conversations.Status(s[0]) != p.status {
			t.Fatalf("query %q: status %q, want %q", raw, p.status, s[0])
		}
		if c, given := q["cursor"]; given != (p.cursor != "") || (given && c[0] != p.cursor) {
			t.Fatalf("query %q: cursor %q, want %q", raw, p.cursor, c)
		}
	})
}
