package validation_test

import (
	"strings"
	"testing"

	"github.com/acme/platform/pkg/validation"
)

func TestJSONDepth(t *testing.T) {
	for _, tc := range []struct {
		json string
		want int
	}{
		{`1`, 0},
		{`"{[{["`, 0},
		{`{}`, 1},
		{`[]`, 1},
		{`{"a":[1,{"b":"]}\"{"}]}`, 3},
		{`{"a":{},"b":{"c":{}}}`, 3},
		{strings.Repeat("[", 40) + strings.Repeat("]", 40), 40},
	} {
		if got := validation.JSONDepth([]byte(tc.json)); got != tc.want {
			t.Errorf("JSONDepth(%s) = %d, want %d", tc.json, got, tc.want)
		}
	}
}
