package openapitest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oasdiff/yaml"
	yaml3 "github.com/oasdiff/yaml3"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// document is a parsed OpenAPI document.
type document struct {
	model *openapi3.T
	json  []byte         // the document as JSON, for validateSchemas
	order map[string]int // position of each path, "path METHOD" and "path METHOD status" in its parent
}

// parse parses spec, resolves its internal references (external ones are
// refused) and records the document order of paths, operations and
// responses, which the model's maps lose.
func parse(spec []byte) (*document, error) {
	var raw json.RawMessage
	if _, err := yaml.Unmarshal(spec, &raw, yaml.DecodeOpts{DisableTimestamps: true}); err != nil {
		return nil, fmt.Errorf("parse OpenAPI document: %w", err)
	}
	var version struct {
		OpenAPI any `json:"openapi"`
		Swagger any `json:"swagger"`
	}
	if err := json.Unmarshal(raw, &version); err != nil {
		return nil, fmt.Errorf("parse OpenAPI document: %w", err)
	}
	v, _ := cmp.Or(version.OpenAPI, version.Swagger).(string)
	if !strings.HasPrefix(v, "3.") {
		return nil, fmt.Errorf("OpenAPI document has version %q; only 3.x is supported", v)
	}

	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	model, err := loader.LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("load OpenAPI document:\n%s", bullets(splitErrors(err)))
	}
	var node yaml3.Node
	if err := yaml3.Unmarshal(spec, &node); err != nil {
		return nil, fmt.Errorf("parse OpenAPI document: %w", err)
	}
	return &document{model: model, json: raw, order: documentOrder(&node)}, nil
}

func splitErrors(err error) []string {
	var out []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, splitErrors(e)...)
		}
		return out
	}
	return []string{err.Error()}
}

// documentOrder maps each path, "path METHOD" and "path METHOD status" of
// the document to its position among its siblings.
func documentOrder(n *yaml3.Node) map[string]int {
	order := map[string]int{}
	if n.Kind == yaml3.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	paths := mappingValue(n, "paths")
	eachKey(paths, func(i int, path string, item *yaml3.Node) {
		order[path] = i
		eachKey(item, func(j int, method string, op *yaml3.Node) {
			key := path + " " + strings.ToUpper(method)
			order[key] = j
			eachKey(mappingValue(op, "responses"), func(k int, status string, _ *yaml3.Node) {
				order[key+" "+status] = k
			})
		})
	})
	return order
}

func mappingValue(n *yaml3.Node, key string) *yaml3.Node {
	var out *yaml3.Node
	eachKey(n, func(_ int, k string, v *yaml3.Node) {
		if k == key {
			out = v
		}
	})
	return out
}

func eachKey(n *yaml3.Node, fn func(i int, key string, value *yaml3.Node)) {
	if n == nil || n.Kind != yaml3.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		fn(i/2, n.Content[i].Value, n.Content[i+1])
	}
}

// validateDocument lists every problem of a parsed document; see
// ValidateDocument.
func validateDocument(d *document) []string {
	var problems []string

	// 1. The structure of the document (required fields, unique operationIds,
	// parameters matching the path templates, schemas, examples, ...).
	// Validate picks JSON Schema 2020-12 for 3.1 documents itself.
	if err := d.model.Validate(context.Background(), openapi3.EnableMultiError()); err != nil {
		var multi openapi3.MultiError
		if errors.As(err, &multi) {
			for _, e := range multi {
				problems = append(problems, oneLine(e))
			}
		} else {
			problems = append(problems, oneLine(err))
		}
	}

	// 2. Unique operationIds, listing every operation that shares one.
	ids := map[string][]string{}
	for _, r := range documentedOperations(d) {
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
	// Step 1 accepts some schemas that are not valid JSON Schema, such as
	// "type: strin".
	if d.model.IsOpenAPI31OrLater() {
		problems = append(problems, validateSchemas(d.json)...)
	}
	return problems
}

const documentURL = "urn:openapitest:document"

// validateSchemas compiles every schema of the document (which validates it
// against the JSON Schema 2020-12 meta-schema) and validates every example
// against its schema.
func validateSchemas(raw []byte) []string {
	root, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
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

// documentedOperations lists every operation of the document, once each,
// in document order, with an empty Status.
func documentedOperations(d *document) []Response {
	if d.model.Paths == nil {
		return nil
	}
	var out []Response
	for path, item := range d.model.Paths.Map() {
		if item == nil {
			continue
		}
		for method, op := range item.Operations() {
			out = append(out, Response{Method: strings.ToUpper(method), Path: path, OperationID: op.OperationID})
		}
	}
	slices.SortFunc(out, func(a, b Response) int {
		return cmp.Or(
			cmp.Compare(position(d.order, a.Path), position(d.order, b.Path)),
			cmp.Compare(a.Path, b.Path),
			cmp.Compare(position(d.order, a.Path+" "+a.Method), position(d.order, b.Path+" "+b.Method)),
			cmp.Compare(a.Method, b.Method),
		)
	})
	return out
}

// documentedResponses lists every documented operation and response pair,
// in document order.
func documentedResponses(d *document) []Response {
	var out []Response
	for _, r := range documentedOperations(d) {
		op := d.model.Paths.Value(r.Path).GetOperation(r.Method)
		if op == nil || op.Responses == nil {
			continue
		}
		opKey := r.Path + " " + r.Method + " "
		statuses := slices.Collect(maps.Keys(op.Responses.Map()))
		slices.SortFunc(statuses, func(a, b string) int {
			return cmp.Or(cmp.Compare(position(d.order, opKey+a), position(d.order, opKey+b)), cmp.Compare(a, b))
		})
		for _, s := range statuses {
			r.Status = s
			out = append(out, r)
		}
	}
	return out
}

// position is the document position of key, or after everything when the
// key was not found (e.g. under a $ref).
func position(order map[string]int, key string) int {
	if i, ok := order[key]; ok {
		return i
	}
	return int(^uint(0) >> 1)
}

// formatValidators returns validators for the formats that JSON Schema
// 2020-12 defines and santhosh-tekuri/jsonschema asserts, so that responses
// and requests are held to the same formats as the document's examples.
func formatValidators() (map[string]openapi3.StringFormatValidator, error) {
	names := []string{
		"date-time", "date", "time", "duration", "period", "email", "hostname", "ipv4", "ipv6",
		"uri", "uri-reference", "iri", "iri-reference", "uri-template", "uuid",
		"json-pointer", "relative-json-pointer", "regex", "semver",
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	out := make(map[string]openapi3.StringFormatValidator, len(names))
	for _, name := range names {
		loc := "urn:openapitest:format:" + name
		if err := c.AddResource(loc, map[string]any{"format": name}); err != nil {
			return nil, fmt.Errorf("format %s: %w", name, err)
		}
		s, err := c.Compile(loc)
		if err != nil {
			return nil, fmt.Errorf("format %s: %w", name, err)
		}
		out[name] = openapi3.NewCallbackValidator(func(value string) error {
			if err := s.Validate(value); err != nil {
				return fmt.Errorf("%q is not a valid %s", value, name)
			}
			return nil
		})
	}
	return out, nil
}
