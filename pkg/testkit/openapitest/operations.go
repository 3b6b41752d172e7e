package openapitest

import (
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// Operation describes one documented operation by what a test that
// generates requests for it needs: where it is, which parameters and body
// fields it takes, and whether it wants credentials.
type Operation struct {
	Method      string // upper case
	Path        string // path template, e.g. "/v1/conversations/{id}"
	OperationID string
	PathParams  []string
	Query       []Field
	// BodyType is the media type of the request body, when it takes one
	// ("application/json" or "application/x-www-form-urlencoded").
	BodyType string
	// Body lists the top-level properties of the request body's schema.
	Body []Field
	// Secured is true when every way to call the operation needs
	// credentials (a bearer token, or HTTP Basic).
	Secured bool
}

// Field is a parameter or a body property: its name and the type and
// format of its schema ("string" and "date-time", say; empty when the
// schema has none, or several).
type Field struct {
	Name   string
	Type   string
	Format string
}

// Operations lists every documented operation, in document order.
func (v *Validator) Operations() []Operation {
	var out []Operation
	seen := map[Response]bool{}
	for _, r := range v.ops {
		key := Response{Method: r.Method, Path: r.Path}
		if seen[key] {
			continue
		}
		seen[key] = true
		item := v.doc.Paths.Value(r.Path)
		op := item.GetOperation(r.Method)
		if op == nil {
			continue
		}
		o := Operation{Method: r.Method, Path: r.Path, OperationID: op.OperationID, Secured: v.secured(op)}
		for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
			if p == nil || p.Value == nil {
				continue
			}
			f := fieldOf(p.Value.Name, p.Value.Schema)
			switch p.Value.In {
			case openapi3.ParameterInPath:
				o.PathParams = append(o.PathParams, f.Name)
			case openapi3.ParameterInQuery:
				o.Query = append(o.Query, f)
			}
		}
		if op.RequestBody != nil && op.RequestBody.Value != nil {
			for _, mt := range []string{"application/json", "application/x-www-form-urlencoded"} {
				media := op.RequestBody.Value.Content.Get(mt)
				if media == nil {
					continue
				}
				o.BodyType = mt
				if media.Schema != nil && media.Schema.Value != nil {
					props := map[string]*openapi3.SchemaRef{}
					collectBodyProperties(media.Schema.Value, props, 0)
					for _, name := range sortedNames(props) {
						o.Body = append(o.Body, fieldOf(name, props[name]))
					}
				}
				break
			}
		}
		out = append(out, o)
	}
	return out
}

// secured reports whether every security requirement of op (or of the
// document, when op states none) names a scheme: an empty requirement
// ({}) makes credentials optional.
func (v *Validator) secured(op *openapi3.Operation) bool {
	reqs := v.doc.Security
	if op.Security != nil {
		reqs = *op.Security
	}
	if len(reqs) == 0 {
		return false
	}
	for _, r := range reqs {
		if len(r) == 0 {
			return false
		}
	}
	return true
}

func fieldOf(name string, ref *openapi3.SchemaRef) Field {
	f := Field{Name: name}
	if ref == nil || ref.Value == nil {
		return f
	}
	if ts := ref.Value.Type; ts != nil {
		if types := ts.Slice(); len(types) == 1 {
			f.Type = types[0]
		}
	}
	f.Format = ref.Value.Format
	return f
}

// collectBodyProperties gathers the properties of s and of its allOf,
// oneOf and anyOf branches.
func collectBodyProperties(s *openapi3.Schema, out map[string]*openapi3.SchemaRef, depth int) {
	if s == nil || depth > 8 {
		return
	}
	for name, p := range s.Properties {
		if _, ok := out[name]; !ok {
			out[name] = p
		}
	}
	for _, branches := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
		for _, b := range branches {
			if b != nil {
				collectBodyProperties(b.Value, out, depth+1)
			}
		}
	}
}

func sortedNames(m map[string]*openapi3.SchemaRef) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.SortFunc(names, strings.Compare)
	return names
}
