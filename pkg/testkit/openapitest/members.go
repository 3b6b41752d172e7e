package openapitest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/getkin/kin-openapi/openapi3"
)

// maxDepth bounds the walk of recursive schemas and deep values.
const maxDepth = 64

// undocumentedMembers appends to out one line per member of an object in
// value that schema s does not declare. See the package documentation for
// which schemas are open.
func undocumentedMembers(s *openapi3.Schema, value any, path string, depth int, out *[]string) {
	if s == nil || depth > maxDepth {
		return
	}
	switch val := value.(type) {
	case map[string]any:
		declared := map[string]*openapi3.Schema{}
		open := collectProperties(s, declared, 0)
		for _, name := range slices.Sorted(maps.Keys(val)) {
			member := path + "." + name
			if ps, ok := declared[name]; ok {
				undocumentedMembers(ps, val[name], member, depth+1, out)
			} else if !open && len(declared) > 0 {
				*out = append(*out, fmt.Sprintf("member %s is not documented: add it to the schema's properties, or state additionalProperties explicitly", member))
			}
		}
	case []any:
		items := itemsSchema(s, 0)
		for i, elem := range val {
			undocumentedMembers(items, elem, path+"["+strconv.Itoa(i)+"]", depth+1, out)
		}
	}
}

// collectProperties gathers the declared properties of s and of its allOf
// branches into declared, and reports whether the object is open: any of
// them states additionalProperties, patternProperties or
// unevaluatedProperties, or uses oneOf/anyOf.
func collectProperties(s *openapi3.Schema, declared map[string]*openapi3.Schema, depth int) (open bool) {
	if s == nil || depth > maxDepth {
		return false
	}
	if stated(s.AdditionalProperties) || stated(s.UnevaluatedProperties) ||
		len(s.PatternProperties) > 0 || len(s.OneOf) > 0 || len(s.AnyOf) > 0 || s.If != nil {
		open = true
	}
	for name, p := range s.Properties {
		if _, dup := declared[name]; !dup && p != nil {
			declared[name] = p.Value
		}
	}
	for _, sub := range s.AllOf {
		if sub != nil && collectProperties(sub.Value, declared, depth+1) {
			open = true
		}
	}
	return open
}

// itemsSchema returns the items schema of s or of one of its allOf branches.
func itemsSchema(s *openapi3.Schema, depth int) *openapi3.Schema {
	if s == nil || depth > maxDepth {
		return nil
	}
	if s.Items != nil && s.Items.Value != nil {
		return s.Items.Value
	}
	for _, sub := range s.AllOf {
		if sub != nil {
			if it := itemsSchema(sub.Value, depth+1); it != nil {
				return it
			}
		}
	}
	return nil
}

// stated reports whether the document states the keyword b at all (true,
// false or a schema).
func stated(b openapi3.BoolSchema) bool {
	return b.Has != nil || b.Schema != nil
}
