package web_test

import (
	"errors"
	"net/url"
	"slices"
	"testing"

	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/pkg/web"
)

func TestQuery(t *testing.T) {
	for _, tc := range []struct {
		raw       string
		wantLimit int
		wantBad   []string // fields named invalid, in order
	}{
		{"", 10, nil},
		{"limit=5", 5, nil},
		{"limit=100", 100, nil},
		{"limit=0", 10, []string{"limit"}},
		{"limit=101", 10, []string{"limit"}},
		{"limit=x", 10, []string{"limit"}},
		{"limit=5&limit=5", 10, []string{"limit"}},
		{"limit=5&q=a&q=b", 5, []string{"q"}},
	} {
		values, _ := url.ParseQuery(tc.raw)
		var invalid validation.Collector
		q := web.Query{Values: values, Invalid: &invalid}
		limit := q.Limit(10, 100)
		q.Single("q")
		if limit != tc.wantLimit {
			t.Errorf("%q: limit %d, want %d", tc.raw, limit, tc.wantLimit)
		}
		var got []string
		var verr *validation.Error
		if err := invalid.Err(); errors.As(err, &verr) {
			for _, f := range verr.Fields {
				got = append(got, f.Name)
			}
		}
		if !slices.Equal(got, tc.wantBad) {
			t.Errorf("%q: invalid %v, want %v", tc.raw, got, tc.wantBad)
		}
	}
}
