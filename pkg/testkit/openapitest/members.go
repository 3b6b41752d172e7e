package openapitest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/pb33f/libopenapi/datamodel/high/base"
)

// maxDepth bounds the walk of recursive schemas and deep values.
const maxDepth = 64

// undocumentedMembers appends to out one line per member of an object in
// value that schema s does not declare. See the package documentation for
// which schemas are open.
func undocumentedMembers(s *base.Schema, value any, path string, depth int, out *[]string) {
	if s == nil || depth > maxDepth {
		return
	}
	switch val := value.(type) {
	case map[string]any:
		declared := map[string]*base.Schema{}
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
func collectProperties(s *base.Schema, declared map[string]*base.Schema, depth int) (open bool) {
	if s == nil || depth > maxDepth {
		return false
	}
	if s.AdditionalProperties != nil || s.UnevaluatedProperties != nil ||
		(s.PatternProperties != nil && s.PatternProperties.Len() > 0) ||
		len(s.OneOf) > 0 || len(s.AnyOf) > 0 || s.If != nil {
		open = true
	}
	if s.Properties != nil {
		for p := s.Properties.First(); p != nil; p = p.Next() {
			if _, dup := declared[p.Key()]; !dup && p.Value() != nil {
				declared[p.Key()] = p.Value().Schema()
			}
		}
	}
	for _, sub := range s.AllOf {
		if sub != nil && collectProperties(sub.Schema(), declared, depth+1) {
			open = true
		}
	}
	return open
}

// itemsSchema returns the items schema of s or of one of its allOf branches.
func itemsSchema(s *base.Schema, depth int) *base.Schema {
	if s == nil || depth > maxDepth {
		return nil
	}
	if s.Items != nil && s.Items.IsA() && s.Items.A != nil {
		return s.Items.A.Schema()
	}
	for _, sub := range s.AllOf {
		if sub != nil {
			if it := itemsSchema(sub.Schema(), depth+1); it != nil {
				return it
			}
		}
	}
	return nil
}
