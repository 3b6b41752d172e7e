package client

import (
	"errors"
	"fmt"
	"strings"
)

// link is one link-value of a Link header (RFC 8288 section 3).
type link struct {
	target string
	// params holds the first occurrence of each parameter, by lower-case
	// name (section 3.3: later occurrences of rel are ignored).
	params map[string]string
}

// nextLink returns the target of the first link with the relation type
// "next" in the Link header fields, "" when there is none. Links with an
// anchor parameter are about another resource and are skipped.
func nextLink(fields []string) (string, error) {
	for _, field := range fields {
		links, err := parseLinks(field)
		if err != nil {
			return "", err
		}
		for _, l := range links {
			if a, ok := l.params["anchor"]; ok && a != "" {
				continue
			}
			for _, rel := range strings.Fields(l.params["rel"]) {
				if strings.EqualFold(rel, "next") {
					return l.target, nil
				}
			}
		}
	}
	return "", nil
}

// parseLinks parses one Link header field value:
//
//	Link       = #link-value
//	link-value = "<" URI-Reference ">" *( OWS ";" OWS link-param )
//	link-param = token BWS [ "=" BWS ( token / quoted-string ) ]
//
// Commas and semicolons inside the URI reference or a quoted string do not
// separate anything.
func parseLinks(s string) ([]link, error) {
	var links []link
	i := 0
	skipOWS := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
	}
	token := func() string {
		start := i
		for i < len(s) && isTokenChar(s[i]) {
			i++
		}
		return s[start:i]
	}
	malformed := func(what string) error {
		return fmt.Errorf("malformed Link header: %s at offset %d", what, i)
	}
	for {
		// Empty list elements are allowed (RFC 9110 section 5.6.1).
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == ',') {
			i++
		}
		if i == len(s) {
			return links, nil
		}
		if s[i] != '<' {
			return nil, malformed(`want "<"`)
		}
		end := strings.IndexByte(s[i+1:], '>')
		if end < 0 {
			return nil, malformed(`no ">" after "<"`)
		}
		l := link{target: strings.TrimSpace(s[i+1 : i+1+end]), params: map[string]string{}}
		i += end + 2
		for {
			skipOWS()
			if i == len(s) || s[i] == ',' {
				break
			}
			if s[i] != ';' {
				return nil, malformed(`want ";" or ","`)
			}
			i++
			skipOWS()
			name := strings.ToLower(token())
			if name == "" {
				return nil, malformed("want a parameter name")
			}
			skipOWS()
			value := ""
			if i < len(s) && s[i] == '=' {
				i++
				skipOWS()
				if i < len(s) && s[i] == '"' {
					v, err := quotedString(s, &i)
					if err != nil {
						return nil, malformed(err.Error())
					}
					value = v
				} else if value = token(); value == "" {
					return nil, malformed("want a parameter value")
				}
			}
			if _, dup := l.params[name]; !dup {
				l.params[name] = value
			}
		}
		links = append(links, l)
	}
}

// quotedString reads the quoted-string at s[*i] (which is '"') and moves *i
// past it.
func quotedString(s string, i *int) (string, error) {
	var b strings.Builder
	for j := *i + 1; j < len(s); j++ {
		switch s[j] {
		case '"':
			*i = j + 1
			return b.String(), nil
		case '\\':
			j++
			if j == len(s) {
				return "", errors.New("unterminated quoted string")
			}
		}
		b.WriteByte(s[j])
	}
	return "", errors.New("unterminated quoted string")
}

// isTokenChar reports whether c is a tchar (RFC 9110 section 5.6.2).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
