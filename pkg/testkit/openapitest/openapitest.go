// Package openapitest keeps an OpenAPI 3.1 document and the service it
// describes from drifting apart.
//
// Tests send real HTTP requests to a running service (an httptest.Server, say)
// and pass every exchange through a Validator, which fails the test when
//
//   - the path or the method is not documented,
//   - the request does not match the document (parameters, security, body),
//   - the response status is not documented for the operation,
//   - the response content type, headers or body do not match the document,
//   - a JSON response carries an object member that the schema does not
//     declare (see below).
//
// Typical use:
//
//	api := openapitest.LoadFile(t, "openapi.yaml")
//	resp, body := api.Do(t, srv.Client(), req)            // valid request
//	resp, body = api.DoResponseOnly(t, srv.Client(), bad) // deliberately invalid request
//	...
//	api.AssertAllOperationsCovered(t, "* * 503")          // at the end
//
// Requests that are deliberately invalid (malformed JSON, a wrong content
// type, a missing bearer token) would fail request validation; send them with
// DoResponseOnly, or check them with CheckResponse, which validate only the
// response.
//
// Undocumented members: JSON Schema lets an object carry members its schema
// does not list unless additionalProperties is false. Documents usually leave
// objects open so that clients stay forward compatible, but then a field the
// service adds silently never reaches the document. So, for responses, a
// Validator reports every object member that is not declared by the schema
// (properties, including those of allOf branches). A schema opts out by
// stating additionalProperties (true or a schema), patternProperties or
// unevaluatedProperties explicitly, by using oneOf/anyOf, or by declaring no
// properties at all (a free-form object).
//
// The validation itself is done by github.com/pb33f/libopenapi and
// github.com/pb33f/libopenapi-validator (JSON Schema 2020-12 via
// github.com/santhosh-tekuri/jsonschema), which support OpenAPI 3.1.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	valerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi/datamodel"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// Validator checks HTTP exchanges against one OpenAPI document and records
// which documented responses the checked exchanges exercised. It is safe for
// concurrent use, e.g. by parallel subtests.
type Validator struct {
	model *v3.Document
	lib   validator.Validator
	ops   []Response // every documented operation and response, in document order

	mu   sync.Mutex
	seen map[Response]bool
}

// Response names one documented response of one operation: the method, the
// path template as written in the document, and the response key (a status
// code such as "200", a range such as "4XX", or "default").
type Response struct {
	Method      string // upper case, e.g. "GET"
	Path        string // path template, e.g. "/definitions/{id}"
	Status      string // response key, e.g. "404"
	OperationID string // may be empty
}

// String formats r as "METHOD /path STATUS (operationId)".
func (r Response) String() string {
	s := r.Method + " " + r.Path + " " + r.Status
	if r.OperationID != "" {
		s += " (" + r.OperationID + ")"
	}
	return s
}

func (r Response) key() Response { r.OperationID = ""; return r }

// Load parses and validates spec (YAML or JSON) and returns a Validator for
// it. It stops the test when the document is invalid; see ValidateDocument.
func Load(t testing.TB, spec []byte) *Validator {
	t.Helper()
	v, err := New(spec)
	if err != nil {
		t.Fatalf("openapitest: %v", err)
	}
	return v
}

// LoadFile is Load for a file, typically relative to the test's package
// directory.
func LoadFile(t testing.TB, path string) *Validator {
	t.Helper()
	spec, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("openapitest: %v", err)
	}
	return Load(t, spec)
}

// New is Load without a testing.TB: it returns the problems of an invalid
// document as an error.
func New(spec []byte) (*Validator, error) {
	doc, model, err := parse(spec)
	if err != nil {
		return nil, err
	}
	if errs := validateDocument(doc, model); len(errs) > 0 {
		return nil, fmt.Errorf("invalid OpenAPI document:\n%s", bullets(errs))
	}
	lib := validator.NewValidatorFromV3Model(model,
		config.WithFormatAssertions(), // date-time, uri, ... are checked
	)
	v := &Validator{model: model, lib: lib, seen: map[Response]bool{}}
	v.ops = documentedResponses(model)
	return v, nil
}

// ValidateDocument reports whether spec is a valid OpenAPI 3.x document: it
// parses, every $ref resolves, it conforms to the OpenAPI JSON Schema of its
// version, every schema in it is a valid JSON Schema (2020-12 for 3.1), every
// example conforms to its schema, and operationIds are unique. The error
// lists every problem found, one a line.
func ValidateDocument(spec []byte) error {
	doc, model, err := parse(spec)
	if err != nil {
		return err
	}
	if errs := validateDocument(doc, model); len(errs) > 0 {
		return fmt.Errorf("invalid OpenAPI document:\n%s", bullets(errs))
	}
	return nil
}

func parse(spec []byte) (libopenapi.Document, *v3.Document, error) {
	cfg := datamodel.NewDocumentConfiguration()
	cfg.Logger = slog.New(slog.DiscardHandler) // the errors are returned
	doc, err := libopenapi.NewDocumentWithConfiguration(spec, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("parse OpenAPI document: %w", err)
	}
	if !strings.HasPrefix(doc.GetVersion(), "3.") {
		return nil, nil, fmt.Errorf("OpenAPI document has version %q; only 3.x is supported", doc.GetVersion())
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, nil, fmt.Errorf("build OpenAPI model:\n%s", bullets(splitErrors(err)))
	}
	return doc, &m.Model, nil
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

// Check validates one exchange: the request (with its body reqBody, since the
// request's own body has usually been consumed by then) and the response
// (with its body respBody). It reports every mismatch with t.Errorf and
// records the exercised response for Coverage. req and resp are not modified.
func (v *Validator) Check(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	t.Helper()
	v.check(t, req, reqBody, resp, respBody, true)
}

// CheckResponse is Check without request validation, for requests that are
// deliberately invalid (malformed JSON, wrong content type, missing token).
// The path and method must still be documented, and the response must match
// the document.
func (v *Validator) CheckResponse(t testing.TB, req *http.Request, resp *http.Response, respBody []byte) {
	t.Helper()
	v.check(t, req, nil, resp, respBody, false)
}

// Do sends req with client (http.DefaultClient when nil), reads the whole
// response body, closes it, validates the exchange like Check and returns
// the response and its body. resp.Body is replaced by a reader of the same
// bytes, so the caller may read it again. A transport error stops the test.
func (v *Validator) Do(t testing.TB, client *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	return v.do(t, client, req, true)
}

// DoResponseOnly is Do with CheckResponse: the request is not validated.
func (v *Validator) DoResponseOnly(t testing.TB, client *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	return v.do(t, client, req, false)
}

func (v *Validator) do(t testing.TB, client *http.Client, req *http.Request, checkRequest bool) (*http.Response, []byte) {
	t.Helper()
	if client == nil {
		client = http.DefaultClient
	}
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			t.Fatalf("openapitest: read request body: %v", err)
		}
		reqBody = b
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		req.ContentLength = int64(len(b))
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("openapitest: %s %s: %v", req.Method, req.URL, err)
	}
	respBody, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatalf("openapitest: %s %s: read response body: %v", req.Method, req.URL, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	v.check(t, req, reqBody, resp, respBody, checkRequest)
	return resp, respBody
}

func (v *Validator) check(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte, checkRequest bool) {
	t.Helper()
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	r.GetBody = nil
	r.ContentLength = int64(len(reqBody))
	if len(reqBody) == 0 {
		r.Body = http.NoBody
	}

	head := fmt.Sprintf("%s %s -> %d", req.Method, req.URL.RequestURI(), resp.StatusCode)
	pathItem, perrs, template := paths.FindPath(r, v.model, nil)
	if pathItem == nil || len(perrs) > 0 {
		reason := "the path is not documented"
		if pathItem != nil {
			reason = fmt.Sprintf("the method %s is not documented for %s", req.Method, template)
		}
		t.Errorf("openapitest: %s: %s", head, reason)
		return
	}
	op := operation(pathItem, req.Method)
	if op.OperationId != "" {
		head += " (" + op.OperationId + ")"
	}

	var problems []string
	if checkRequest {
		if ok, errs := v.lib.ValidateHttpRequestSyncWithPathItem(r, pathItem, template); !ok {
			problems = append(problems, prefix("request: ", formatErrors(errs))...)
		}
	}

	status, documented := responseFor(op, resp.StatusCode)
	if !documented {
		problems = append(problems, fmt.Sprintf("response: status %d is not documented for %s %s",
			resp.StatusCode, strings.ToUpper(req.Method), template))
	} else {
		v.mu.Lock()
		v.seen[Response{Method: strings.ToUpper(req.Method), Path: template, Status: status}] = true
		v.mu.Unlock()

		rr := r.Clone(context.Background())
		rr.Body = http.NoBody
		rs := new(http.Response)
		*rs = *resp
		rs.Request = rr
		rs.Body = io.NopCloser(bytes.NewReader(respBody))
		rs.ContentLength = int64(len(respBody))
		if ok, errs := v.lib.GetResponseBodyValidator().ValidateResponseBodyWithPathItem(rr, rs, pathItem, template); !ok {
			problems = append(problems, prefix("response: ", formatErrors(errs))...)
		}
		problems = append(problems, prefix("response: ", responseExtras(documentedResponse(op, status), resp, respBody))...)
	}

	if len(problems) == 0 {
		return
	}
	msg := fmt.Sprintf("openapitest: %s does not match the OpenAPI document:\n%s", head, bullets(problems))
	if checkRequest && len(reqBody) > 0 {
		msg += "\n  request body: " + excerpt(reqBody)
	}
	if len(respBody) > 0 {
		msg += "\n  response body: " + excerpt(respBody)
	}
	t.Errorf("%s", msg)
}

// responseExtras checks what the library leaves out: a body on a response
// documented without content, and undocumented members of JSON objects.
func responseExtras(doc *v3.Response, resp *http.Response, body []byte) []string {
	if doc == nil {
		return nil
	}
	if doc.Content == nil || doc.Content.Len() == 0 {
		if len(bytes.TrimSpace(body)) > 0 {
			return []string{fmt.Sprintf("the response is documented without a body, but has %d bytes (Content-Type %q)", len(body), resp.Header.Get("Content-Type"))}
		}
		return nil
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || !isJSON(mt) {
		return nil
	}
	media, ok := doc.Content.Get(mt)
	if !ok || media == nil || media.Schema == nil {
		return nil
	}
	schema := media.Schema.Schema()
	// The library accepts an empty body and a JSON null for any schema.
	if len(bytes.TrimSpace(body)) == 0 {
		return []string{fmt.Sprintf("the response body is empty, but the document defines %s content for it", mt)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var value any
	if err := dec.Decode(&value); err != nil {
		return nil // the library has reported it
	}
	if value == nil && schema != nil && len(schema.Type) > 0 && !slices.Contains(schema.Type, "null") {
		return []string{fmt.Sprintf("the response body is JSON null, but the schema allows only %s", strings.Join(schema.Type, ", "))}
	}
	var out []string
	undocumentedMembers(schema, value, "$", 0, &out)
	return out
}

func isJSON(mediaType string) bool {
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}

// operation returns the operation of item for method, or nil.
func operation(item *v3.PathItem, method string) *v3.Operation {
	for pair := item.GetOperations().First(); pair != nil; pair = pair.Next() {
		if strings.EqualFold(pair.Key(), method) {
			return pair.Value()
		}
	}
	return nil
}

// responseFor returns the response key of op that documents status: the
// code itself, its range ("4XX"), or "default".
func responseFor(op *v3.Operation, status int) (string, bool) {
	if op == nil || op.Responses == nil {
		return "", false
	}
	code := strconv.Itoa(status)
	if op.Responses.Codes != nil {
		if _, ok := op.Responses.Codes.Get(code); ok {
			return code, true
		}
		rng := fmt.Sprintf("%dXX", status/100)
		for pair := op.Responses.Codes.First(); pair != nil; pair = pair.Next() {
			if strings.EqualFold(pair.Key(), rng) {
				return pair.Key(), true
			}
		}
	}
	if op.Responses.Default != nil {
		return "default", true
	}
	return "", false
}

func documentedResponse(op *v3.Operation, key string) *v3.Response {
	if key == "default" {
		return op.Responses.Default
	}
	r, _ := op.Responses.Codes.Get(key)
	return r
}

// formatErrors renders library errors one a line, with the failing field and
// schema keyword of schema errors.
func formatErrors(errs []*valerrors.ValidationError) []string {
	var out []string
	for _, e := range errs {
		if e == nil {
			continue
		}
		line := e.Message
		if e.Reason != "" && e.Reason != e.Message {
			line += ": " + e.Reason
		}
		if len(e.SchemaValidationErrors) == 0 {
			out = append(out, line)
			continue
		}
		for _, s := range e.SchemaValidationErrors {
			where := s.FieldPath
			if where == "" {
				where = "$"
				if len(s.InstancePath) > 0 {
					where += "/" + strings.Join(s.InstancePath, "/")
				}
			}
			detail := fmt.Sprintf("%s: at %s: %s", e.Message, where, s.Reason)
			if s.KeywordLocation != "" {
				detail += " (schema " + s.KeywordLocation + ")"
			}
			out = append(out, detail)
		}
	}
	return out
}

func prefix(p string, lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = p + l
	}
	return out
}

func bullets(lines []string) string {
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("  - ")
		b.WriteString(strings.ReplaceAll(l, "\n", "\n    "))
	}
	return b.String()
}

const maxExcerpt = 1024

func excerpt(b []byte) string {
	if len(b) <= maxExcerpt {
		return string(b)
	}
	cut := maxExcerpt
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + fmt.Sprintf("... (%d bytes)", len(b))
}
