package http

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/services/conversations"
)

// FuzzListParams parses arbitrary raw query strings as the list handler
// does (url.ParseQuery, which keeps the well-formed pairs, as
// echo's QueryParams does) with parseListParams. The error is nil or a 400
// validation_failed *problem.Problem naming limit, status, updatedAfter or
// cursor; a success has a limit within 1..max (the default when absent), a
// valid or empty status, the given updatedAfter at millisecond precision,
// and the given cursor.
func FuzzListParams(f *testing.F) {
	for _, seed := range []string{
		"", "limit=10", "limit=1", "limit=100", "limit=101", "limit=0", "limit=-1", "limit=+5",
		"limit=1e2", "limit=0x10", "limit=9223372036854775808", "limit= 5", "limit=5&limit=5",
		"status=open", "status=snoozed", "status=closed", "status=OPEN", "status=", "status=open&status=closed",
		"cursor=abc", "cursor=", "cursor=a&cursor=b", "limit=2&status=open&cursor=AQID",
		"limit=%31%30", "limit=%zz", "%", "&&&", "=", "limit", "status", "cursor", ";limit=5",
		"limit=5;status=open", "unknown=1&limit=3", "limit=３",
		"updatedAfter=2024-05-01T12:00:00Z", "updatedAfter=2024-05-01T12:00:00.123456%2B02:00", "updatedAfter=2024-05-01",
		"updatedAfter=", "updatedAfter=x&updatedAfter=y", "updatedAfter=2024-05-01T12:00:00+02:00",
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
			var invalid *validation.Error
			if !errors.As(err, &invalid) {
				t.Fatalf("query %q: error %v (%T) is not a *validation.Error", raw, err, err)
			}
			pr := problemFor(err)
			if pr.Status != http.StatusBadRequest || pr.Code != problem.CodeValidationFailed || len(pr.Errors) == 0 {
				t.Fatalf("query %q: problem %+v, want a 400 validation_failed with fields", raw, pr)
			}
			for _, fe := range pr.Errors {
				if !slices.Contains([]string{"limit", "status", "updatedAfter", "cursor"}, fe.Field) || fe.Reason == "" {
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
		if v, given := q["updatedAfter"]; given {
			want, err := time.Parse(time.RFC3339Nano, v[0])
			if err != nil || p.updatedAfter == nil || !p.updatedAfter.Equal(want.Truncate(time.Millisecond)) || p.updatedAfter.Location() != time.UTC {
				t.Fatalf("query %q: updatedAfter %v from %q", raw, p.updatedAfter, v[0])
			}
		} else if p.updatedAfter != nil {
			t.Fatalf("query %q: updatedAfter %v without the parameter", raw, p.updatedAfter)
		}
		if c, given := q["cursor"]; given != (p.cursor != "") || (given && c[0] != p.cursor) {
			t.Fatalf("query %q: cursor %q, want %q", raw, p.cursor, c)
		}
	})
}

// FuzzIfMatch parses arbitrary If-Match values. A value is refused with a
// 400 naming If-Match, or parsed; the ETag of every version it names
// parses back to a precondition matching that version, and a precondition
// of * matches every version.
func FuzzIfMatch(f *testing.F) {
	for _, seed := range []string{`"1"`, `*`, `W/"1"`, `"1", "2"`, `"abc"`, `1`, `"1`, `, ,`, `"1" "2"`, ` "7" `, `"01"`, `"-1"`, "\"\x80\"", `*, "1"`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		p, err := parseIfMatch([]string{value})
		if err != nil {
			pr := problemFor(err)
			if pr.Status != http.StatusBadRequest || len(pr.Errors) != 1 || pr.Errors[0].Field != "If-Match" {
				t.Fatalf("%q: error %v", value, err)
			}
			return
		}
		if !p.Given {
			t.Fatalf("%q: parsed as no If-Match", value)
		}
		if p.Any && !p.Matches(12345) {
			t.Fatalf("%q: * does not match", value)
		}
		for _, v := range p.Versions {
			if v < 0 || !p.Matches(v) {
				t.Fatalf("%q: version %d", value, v)
			}
			back, err := parseIfMatch([]string{etag(conversations.Conversation{Version: v})})
			if err != nil || !back.Matches(v) || back.Matches(v+1) {
				t.Fatalf("%q: the ETag of version %d does not parse back: %+v %v", value, v, back, err)
			}
		}
	})
}
