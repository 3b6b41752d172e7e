package validation_test

import (
	"errors"
	"testing"

	"github.com/acme/platform/pkg/validation"
)

func TestNullableString(t *testing.T) {
	short := func(s string) string {
		if len(s) > 3 {
			return "is too long"
		}
		return ""
	}
	for _, tc := range []struct {
		raw    string
		want   *string
		reason string
	}{
		{` null `, ptr(""), ""},
		{`"abc"`, ptr("abc"), ""},
		{`"abcd"`, nil, "is too long"},
		{`5`, nil, "must be a JSON string or null"},
		{`{"a":1}`, nil, "must be a JSON string or null"},
	} {
		var c validation.Collector
		got := c.NullableString("f", []byte(tc.raw), short)
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%s: got %v, want %v", tc.raw, got, tc.want)
		}
		var verr *validation.Error
		reason := ""
		if errors.As(c.Err(), &verr) {
			reason = verr.Fields[0].Reason
		}
		if reason != tc.reason {
			t.Errorf("%s: reason %q, want %q", tc.raw, reason, tc.reason)
		}
	}
}

func ptr(s string) *string { return &s }
