package http

import (
	"strconv"
	"strings"

	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/services/conversations"
)

// etag is the strong entity tag of a conversation's state: its version in
// quotes. The version grows by one with every stored change (one
// compare-and-set each), so two states of one conversation never share a
// tag.
func etag(c conversations.Conversation) string {
	return `"` + strconv.FormatInt(c.Version, 10) + `"`
}

// parseIfMatch parses the If-Match header fields (RFC 9110 section 13.1.1:
// "*" or a comma-separated list of entity tags). A tag that is well-formed
// but not one of ours, or weak (If-Match compares strongly), matches
// nothing; a malformed field is a 400.
func parseIfMatch(values []string) (conversations.Precondition, error) {
	if len(values) == 0 {
		return conversations.Precondition{}, nil
	}
	p := conversations.Precondition{Given: true}
	invalid := validation.Invalid("If-Match", `must be * or a list of entity tags such as "3", as sent in ETag`)
	s := strings.Join(values, ",")
	if strings.TrimSpace(s) == "*" {
		p.Any = true
		return p, nil
	}
	tags := 0
	for {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			break
		}
		weak := strings.HasPrefix(s, "W/")
		if weak {
			s = s[2:]
		}
		if !strings.HasPrefix(s, `"`) {
			return conversations.Precondition{}, invalid
		}
		end := strings.IndexByte(s[1:], '"')
		if end < 0 {
			return conversations.Precondition{}, invalid
		}
		opaque := s[1 : 1+end]
		for i := 0; i < len(opaque); i++ {
			if b := opaque[i]; b < 0x21 || b == 0x7f {
				return conversations.Precondition{}, invalid
			}
		}
		s = s[end+2:]
		if rest := strings.TrimLeft(s, " \t"); rest != "" && rest[0] != ',' {
			return conversations.Precondition{}, invalid
		}
		tags++
		if v, err := strconv.ParseInt(opaque, 10, 64); err == nil && !weak && v >= 0 && strconv.FormatInt(v, 10) == opaque {
			p.Versions = append(p.Versions, v)
		}
	}
	if tags == 0 {
		return conversations.Precondition{}, invalid
	}
	return p, nil
}
