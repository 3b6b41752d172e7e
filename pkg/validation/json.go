package validation

// MaxJSONDepth is how deeply the free-form JSON members a caller stores
// (a definition's config, a message's metadata) may nest: the member's
// own object is level 1, each object or array inside it one more.
// Configuration and metadata are flat in practice; a bound keeps every
// reader (the services, the client libraries, callers' own parsers with
// recursion limits) able to parse what the API serves back.
const MaxJSONDepth = 32

// JSONDepth returns how deeply the JSON text data nests objects and
// arrays: 0 for a scalar, 1 for {} or [], 2 for {"a":[]}, and so on. It
// scans the bytes without recursion or allocation, so that measuring a
// hostile document costs no more than reading it; brackets inside
// strings do not count. data is expected to be valid JSON (the depth of
// invalid text is whatever its brackets add up to).
func JSONDepth(data []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, b := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			depth++
			deepest = max(deepest, depth)
		case b == '}' || b == ']':
			depth--
		}
	}
	return deepest
}
