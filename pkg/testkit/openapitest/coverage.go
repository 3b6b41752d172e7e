package openapitest

import (
	"fmt"
	"path"
	"strings"
	"testing"
)

// Coverage lists the documented responses, in document order, split into
// those that some checked exchange exercised and those that none did.
type Coverage struct {
	Covered []Response
	Missed  []Response
}

// Coverage reports which documented operation and response pairs the checked
// exchanges have exercised so far. An exchange counts when its path, method
// and status are documented, whether or not it matched the schemas (a
// mismatch is reported by Check).
func (v *Validator) Coverage() Coverage {
	v.mu.Lock()
	defer v.mu.Unlock()
	var c Coverage
	for _, r := range v.ops {
		if v.seen[r.key()] {
			c.Covered = append(c.Covered, r)
		} else {
			c.Missed = append(c.Missed, r)
		}
	}
	return c
}

// AssertAllOperationsCovered fails the test, listing what was missed, when
// some documented operation and response pair was never exercised. Each
// exception is "METHOD PATH STATUS" where every field is a path.Match
// pattern (and a lone "*" matches any path), e.g. "* * 503" (no test makes
// the database unreachable), "POST /login 429" or "GET /definitions/* 401".
// PATH is the path template of the document, e.g. "/definitions/{id}".
func (v *Validator) AssertAllOperationsCovered(t testing.TB, except ...string) {
	t.Helper()
	var excepts [][]string
	for _, e := range except {
		f := strings.Fields(e)
		if len(f) != 3 {
			t.Fatalf("openapitest: exception %q is not \"METHOD PATH STATUS\"", e)
		}
		for _, p := range f {
			if _, err := path.Match(p, ""); err != nil {
				t.Fatalf("openapitest: exception %q: %v", e, err)
			}
		}
		excepts = append(excepts, f)
	}
	excepted := func(r Response) bool {
		for _, f := range excepts {
			if match(strings.ToUpper(f[0]), r.Method) && match(f[1], r.Path) && match(f[2], r.Status) {
				return true
			}
		}
		return false
	}
	c := v.Coverage()
	var missed []string
	for _, r := range c.Missed {
		if !excepted(r) {
			missed = append(missed, r.String())
		}
	}
	if len(missed) > 0 {
		t.Errorf("openapitest: %d of %d documented responses were never exercised:\n%s",
			len(missed), len(c.Covered)+len(c.Missed), bullets(missed))
	}
}

// match is path.Match, except that a lone "*" matches anything, slashes
// included.
func match(pattern, s string) bool {
	if pattern == "*" {
		return true
	}
	ok, _ := path.Match(pattern, s)
	return ok
}

// String formats the coverage, one response a line, for logging.
func (c Coverage) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d documented responses exercised", len(c.Covered), len(c.Covered)+len(c.Missed))
	for _, r := range c.Missed {
		b.WriteString("\n  missed: ")
		b.WriteString(r.String())
	}
	return b.String()
}
