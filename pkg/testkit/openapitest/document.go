package openapitest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// validateDocument lists every problem of a parsed document; see
// ValidateDocument.
func validateDocument(doc libopenapi.Document, model *v3.Document) []string {
	var problems []string

	// 1. The document against the OpenAPI JSON Schema of its version.
	if ok, errs := schema_validation.ValidateOpenAPIDocument(doc); !ok {
		for _, e := range errs {
			if len(e.SchemaValidationErrors) == 0 {
				problems = append(problems, lineOf(e.SpecLine)+e.Message+": "+e.Reason)
				continue
			}
			for _, s := range e.SchemaValidationErrors {
				where := s.FieldPath
				if where == "" {
					where = "/" + strings.Join(s.InstancePath, "/")
				}
				problems = append(problems, fmt.Sprintf("%sat %s: %s", lineOf(s.Line), where, s.Reason))
			}
		}
	}

	// 2. Unique operationIds (the OpenAPI JSON Schema cannot express it).
	ids := map[string][]string{}
	for _, r := range documentedOperations(model) {
		if r.OperationID != "" {
			ids[r.OperationID] = append(ids[r.OperationID], r.Method+" "+r.Path)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		if where := ids[id]; len(where) > 1 {
			problems = append(problems, fmt.Sprintf("operationId %q is used by %d operations: %s", id, len(where), strings.Join(where, ", ")))
		}
	}

	// 3. The schemas and examples, with a JSON Schema 2020-12 validator.
	// The OpenAPI JSON Schema accepts any object as a schema, so a typo
	// such as "type: strin" passes step 1.
	if strings.HasPrefix(doc.GetVersion(), "3.1") || strings.HasPrefix(doc.GetVersion(), "3.2") {
		problems = append(problems, validateSchemas(doc)...)
	}
	return problems
}

func lineOf(line int) string {
	if line > 0 {
		return "line " + strconv.Itoa(line) + ": "
	}
	return ""
}

const documentURL = "urn:openapitest:document"

// validateSchemas compiles every schema of the document (which validates it
// against the JSON Schema 2020-12 meta-schema) and validates every example
// against its schema.
func validateSchemas(doc libopenapi.Document) []string {
	raw := doc.GetSpecInfo().GetSpecJSONBytes()
	if raw == nil {
		return []string{"the document cannot be converted to JSON"}
	}
	root, err := jsonschema.UnmarshalJSON(bytes.NewReader(*raw))
	if err != nil {
		return []string{"the document cannot be converted to JSON: " + err.Error()}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	if err := c.AddResource(documentURL, root); err != nil {
		return []string{err.Error()}
	}

	var problems []string
	reported := map[string]bool{} // a broken schema fails every schema that refers to it
	compile := func(ptr string) *jsonschema.Schema {
		s, err := c.Compile(documentURL + "#" + ptr)
		if err != nil {
			if msg := oneLine(err); !reported[msg] {
				reported[msg] = true
				problems = append(problems, fmt.Sprintf("schema %s: %s", ptr, msg))
			}
			return nil
		}
		return s
	}
	check := func(schemaPtr, examplePtr string, example any) {
		s := compile(schemaPtr)
		if s == nil {
			return
		}
		if err := s.Validate(example); err != nil {
			problems = append(problems, fmt.Sprintf("example %s does not match schema %s: %s", examplePtr, schemaPtr, oneLine(err)))
		}
	}

	for _, loc := range schemaLocations(root) {
		compile(loc.schema)
		for ptr, ex := range loc.examples {
			check(loc.schema, ptr, ex)
		}
		walkSubschemas(loc.node, loc.schema, func(ptr string, node map[string]any) {
			if ex, ok := node["example"]; ok {
				check(ptr, ptr+"/example", ex)
			}
			if exs, ok := node["examples"].([]any); ok {
				for i, ex := range exs {
					check(ptr, ptr+"/examples/"+strconv.Itoa(i), ex)
				}
			}
		})
	}
	sort.Strings(problems)
	return dedupe(problems)
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("openapitest does not load external references (%s)", url)
}

// schemaLocation is one place where the document holds a schema: the JSON
// pointer of the schema and the examples of its parameter, header or media
// type, by JSON pointer.
type schemaLocation struct {
	schema   string
	node     any
	examples map[string]any
}

// schemaLocations finds the schemas of components, parameters, headers,
// request bodies and responses, in path and component order.
func schemaLocations(root any) []schemaLocation {
	var out []schemaLocation
	doc, _ := root.(map[string]any)

	// holder is a parameter, header or media type object: it has a schema
	// and maybe example / examples.
	holder := func(ptr string, v any) {
		h, ok := v.(map[string]any)
		if !ok || h["schema"] == nil {
			return
		}
		loc := schemaLocation{schema: ptr + "/schema", node: h["schema"], examples: map[string]any{}}
		if ex, ok := h["example"]; ok {
			loc.examples[ptr+"/example"] = ex
		}
		if exs, ok := h["examples"].(map[string]any); ok {
			for name, ex := range exs {
				if e, ok := ex.(map[string]any); ok {
					if val, ok := e["value"]; ok {
						loc.examples[ptr+"/examples/"+escape(name)+"/value"] = val
					}
				}
			}
		}
		out = append(out, loc)
	}
	content := func(ptr string, v any) {
		for _, mt := range sortedKeys(v) {
			holder(ptr+"/"+escape(mt), v.(map[string]any)[mt])
		}
	}
	parameters := func(ptr string, v any) {
		list, _ := v.([]any)
		for i, p := range list {
			pp := ptr + "/" + strconv.Itoa(i)
			holder(pp, p)
			if m, ok := p.(map[string]any); ok {
				content(pp+"/content", m["content"])
			}
		}
	}
	response := func(ptr string, v any) {
		r, ok := v.(map[string]any)
		if !ok {
			return
		}
		content(ptr+"/content", r["content"])
		for _, name := range sortedKeys(r["headers"]) {
			holder(ptr+"/headers/"+escape(name), r["headers"].(map[string]any)[name])
		}
	}
	operation := func(ptr string, v any) {
		op, ok := v.(map[string]any)
		if !ok {
			return
		}
		parameters(ptr+"/parameters", op["parameters"])
		if rb, ok := op["requestBody"].(map[string]any); ok {
			content(ptr+"/requestBody/content", rb["content"])
		}
		if rs, ok := op["responses"].(map[string]any); ok {
			for _, code := range sortedKeys(rs) {
				response(ptr+"/responses/"+escape(code), rs[code])
			}
		}
	}

	pathsObj, _ := doc["paths"].(map[string]any)
	for _, p := range sortedKeys(pathsObj) {
		item, ok := pathsObj[p].(map[string]any)
		if !ok {
			continue
		}
		ptr := "/paths/" + escape(p)
		parameters(ptr+"/parameters", item["parameters"])
		for _, m := range []string{"get", "put", "post", "delete", "options", "head", "patch", "trace", "query"} {
			operation(ptr+"/"+m, item[m])
		}
	}

	comps, _ := doc["components"].(map[string]any)
	if schemas, ok := comps["schemas"].(map[string]any); ok {
		for _, name := range sortedKeys(schemas) {
			out = append(out, schemaLocation{schema: "/components/schemas/" + escape(name), node: schemas[name]})
		}
	}
	if ps, ok := comps["parameters"].(map[string]any); ok {
		for _, name := range sortedKeys(ps) {
			ptr := "/components/parameters/" + escape(name)
			holder(ptr, ps[name])
			if m, ok := ps[name].(map[string]any); ok {
				content(ptr+"/content", m["content"])
			}
		}
	}
	if hs, ok := comps["headers"].(map[string]any); ok {
		for _, name := range sortedKeys(hs) {
			holder("/components/headers/"+escape(name), hs[name])
		}
	}
	if rbs, ok := comps["requestBodies"].(map[string]any); ok {
		for _, name := range sortedKeys(rbs) {
			if rb, ok := rbs[name].(map[string]any); ok {
				content("/components/requestBodies/"+escape(name)+"/content", rb["content"])
			}
		}
	}
	if rs, ok := comps["responses"].(map[string]any); ok {
		for _, name := range sortedKeys(rs) {
			response("/components/responses/"+escape(name), rs[name])
		}
	}
	return out
}

// walkSubschemas calls fn for the schema at ptr and every subschema under it
// that applies to a value or a part of it.
func walkSubschemas(node any, ptr string, fn func(ptr string, node map[string]any)) {
	var walk func(node any, ptr string, depth int)
	walk = func(node any, ptr string, depth int) {
		m, ok := node.(map[string]any)
		if !ok || depth > 32 {
			return
		}
		fn(ptr, m)
		for _, kw := range []string{"properties", "patternProperties", "$defs", "dependentSchemas"} {
			for _, name := range sortedKeys(m[kw]) {
				walk(m[kw].(map[string]any)[name], ptr+"/"+kw+"/"+escape(name), depth+1)
			}
		}
		for _, kw := range []string{"allOf", "anyOf", "oneOf", "prefixItems"} {
			if list, ok := m[kw].([]any); ok {
				for i, s := range list {
					walk(s, ptr+"/"+kw+"/"+strconv.Itoa(i), depth+1)
				}
			}
		}
		for _, kw := range []string{"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties"} {
			walk(m[kw], ptr+"/"+kw, depth+1)
		}
	}
	walk(node, ptr, 0)
}

func sortedKeys(v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// escape escapes a JSON pointer token (RFC 6901).
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), documentURL, "")), " ")
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// documentedOperations lists every operation of the model, once each, with
// an empty Status.
func documentedOperations(model *v3.Document) []Response {
	var out []Response
	if model.Paths == nil || model.Paths.PathItems == nil {
		return nil
	}
	for pair := model.Paths.PathItems.First(); pair != nil; pair = pair.Next() {
		for op := pair.Value().GetOperations().First(); op != nil; op = op.Next() {
			out = append(out, Response{
				Method:      strings.ToUpper(op.Key()),
				Path:        pair.Key(),
				OperationID: op.Value().OperationId,
			})
		}
	}
	return out
}

// documentedResponses lists every documented operation and response pair.
func documentedResponses(model *v3.Document) []Response {
	var out []Response
	for _, r := range documentedOperations(model) {
		op := operation(model.Paths.PathItems.GetOrZero(r.Path), r.Method)
		if op == nil || op.Responses == nil {
			continue
		}
		if op.Responses.Codes != nil {
			for c := op.Responses.Codes.First(); c != nil; c = c.Next() {
				r.Status = c.Key()
				out = append(out, r)
			}
		}
		if op.Responses.Default != nil {
			r.Status = "default"
			out = append(out, r)
		}
	}
	return out
}
