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
// The validation itself is done by github.com/getkin/kin-openapi (openapi3,
// openapi3filter and its legacy router), which supports OpenAPI 3.1. Bodies
// are validated when they are JSON. Every schema and example of a 3.1
// document is also checked as JSON Schema 2020-12 with
// github.com/santhosh-tekuri/jsonschema, whose format checks (date-time,
// uri, email, ...) apply to the bodies too.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Validator checks HTTP exchanges against one OpenAPI document and records
// which documented responses the checked exchanges exercised. It is safe for
// concurrent use, e.g. by parallel subtests.
type Validator struct {
	*compiled // shared by every Validator of the same document

	mu   sync.Mutex
	seen map[Response]bool
}

// compiled is what a Validator needs of its document, built once per
// document and process (see compile) and never changed afterwards.
type compiled struct {
	doc       *openapi3.T
	router    routers.Router
	basePaths []string // the paths of the server URLs, e.g. "/v1"
	options   *openapi3filter.Options
	noBodies  *openapi3filter.Options // options, without body validation
	ops       []Response              // every documented operation and response, in document order
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
	c, err := compile(spec)
	if err != nil {
		return nil, err
	}
	return &Validator{compiled: c, seen: map[Response]bool{}}, nil
}

// compiledDocuments memoizes compile by the document's bytes: a test
// package typically loads its document for every test, and parsing,
// validating and routing one (every schema and example compiled as JSON
// Schema) costs far more than the exchanges a test checks, most of all
// under -race.
var compiledDocuments sync.Map // string(spec) -> func() (*compiled, error)

// compile parses, validates and routes spec, once per process for the same
// bytes; the result is shared and must not be changed.
func compile(spec []byte) (*compiled, error) {
	once, _ := compiledDocuments.LoadOrStore(string(spec), sync.OnceValues(func() (*compiled, error) {
		return compileDocument(spec)
	}))
	return once.(func() (*compiled, error))()
}

func compileDocument(spec []byte) (*compiled, error) {
	d, err := parse(spec)
	if err != nil {
		return nil, err
	}
	if errs := validateDocument(d); len(errs) > 0 {
		return nil, fmt.Errorf("invalid OpenAPI document:\n%s", bullets(errs))
	}

	// Requests are matched on their path only, whatever host the test
	// server listens on: the router gets a copy of the document without
	// servers, and check strips the servers' base paths.
	routed := *d.model
	routed.Servers = nil
	router, err := legacy.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("route OpenAPI document: %w", err)
	}
	formats, err := formatValidators()
	if err != nil {
		return nil, err
	}
	c := &compiled{
		doc:       d.model,
		router:    router,
		basePaths: basePaths(d.model),
		options: &openapi3filter.Options{
			MultiError:            true, // every problem, not the first
			IncludeResponseStatus: true,
			SkipSettingDefaults:   true, // the request is only looked at
			AuthenticationFunc:    checkCredentials,
			// 3.1 documents get JSON Schema 2020-12 from openapi3filter itself.
			SchemaValidationOptions: []openapi3.SchemaValidationOption{
				openapi3.WithStringFormatValidators(formats),
			},
		},
	}
	noBodies := *c.options
	noBodies.ExcludeRequestBody, noBodies.ExcludeResponseBody = true, true
	c.noBodies = &noBodies
	c.ops = documentedResponses(d)
	return c, nil
}

// ValidateDocument reports whether spec is a valid OpenAPI 3.x document: it
// parses, every $ref resolves, it passes the structural validation of
// kin-openapi, every schema in it is a valid JSON Schema (2020-12 for 3.1),
// every example conforms to its schema, and operationIds are unique. The
// error lists every problem found, one a line.
func ValidateDocument(spec []byte) error {
	d, err := parse(spec)
	if err != nil {
		return err
	}
	if errs := validateDocument(d); len(errs) > 0 {
		return fmt.Errorf("invalid OpenAPI document:\n%s", bullets(errs))
	}
	return nil
}

// basePaths lists the paths of the document's server URLs that are not "/".
func basePaths(doc *openapi3.T) []string {
	var out []string
	for _, s := range doc.Servers {
		if s == nil {
			continue
		}
		u, err := url.Parse(s.URL)
		if err != nil {
			continue
		}
		if p := strings.TrimSuffix(u.Path, "/"); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// checkCredentials checks that a request carries the credentials of a
// security scheme in the right place and form, without verifying them: an
// Authorization header with the scheme (e.g. "Bearer ...") for http schemes,
// the named header, query parameter or cookie for apiKey schemes. Other
// schemes (oauth2, openIdConnect, mutualTLS) are accepted as they are.
func checkCredentials(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	req := in.RequestValidationInput.Request
	s := in.SecurityScheme
	switch strings.ToLower(s.Type) {
	case "http":
		h := req.Header.Get("Authorization")
		if h == "" {
			return in.NewError(fmt.Errorf("security scheme %q (%s): the Authorization header is missing", in.SecuritySchemeName, s.Scheme))
		}
		if len(h) < len(s.Scheme) || !strings.EqualFold(h[:len(s.Scheme)], s.Scheme) {
			return in.NewError(fmt.Errorf("security scheme %q: the Authorization header does not use the scheme %q", in.SecuritySchemeName, s.Scheme))
		}
	case "apikey":
		var found bool
		switch s.In {
		case "header":
			found = req.Header.Get(s.Name) != ""
		case "query":
			found = req.URL.Query().Get(s.Name) != ""
		case "cookie":
			c, err := req.Cookie(s.Name)
			found = err == nil && c.Value != ""
		}
		if !found {
			return in.NewError(fmt.Errorf("security scheme %q: the API key %q is missing from the %s", in.SecuritySchemeName, s.Name, s.In))
		}
	}
	return nil
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
	route, pathParams, template := v.findRoute(r)
	if route == nil {
		reason := "the path is not documented"
		if template != "" {
			reason = fmt.Sprintf("the method %s is not documented for %s", req.Method, template)
		}
		t.Errorf("openapitest: %s: %s", head, reason)
		return
	}
	op := route.Operation
	if op.OperationID != "" {
		head += " (" + op.OperationID + ")"
	}

	var problems []string
	if checkRequest {
		var content openapi3.Content
		if op.RequestBody != nil && op.RequestBody.Value != nil {
			content = op.RequestBody.Value.Content
		}
		opts := v.optionsFor(content, r.Header)
		in := &openapi3filter.RequestValidationInput{Request: r, PathParams: pathParams, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			problems = append(problems, prefix("request: ", errorLines(err))...)
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
		var content openapi3.Content
		if doc := documentedResponse(op, status); doc != nil {
			content = doc.Content
		}
		opts := v.optionsFor(content, resp.Header)
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: rr, PathParams: pathParams, Route: route, Options: opts},
			Status:                 resp.StatusCode,
			Header:                 resp.Header,
			Options:                opts,
		}
		in.SetBodyBytes(respBody)
		if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
			problems = append(problems, prefix("response: ", errorLines(err))...)
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

// optionsFor returns the options for validating a message with header
// against the documented content: bodies are validated when they are JSON,
// like the schemas are written for. A body of another documented media type
// (a YAML document served as a string, say) is left alone, since
// openapi3filter would decode it into a value its schema does not describe.
// An undocumented media type is still reported.
func (v *Validator) optionsFor(content openapi3.Content, header http.Header) *openapi3filter.Options {
	mt, _, err := mime.ParseMediaType(header.Get("Content-Type"))
	if err != nil || isJSON(mt) || content.Get(mt) == nil {
		return v.options
	}
	return v.noBodies
}

// methods are the methods tried to tell an undocumented method of a
// documented path from an undocumented path.
var methods = []string{
	http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodOptions,
	http.MethodHead, http.MethodPatch, http.MethodTrace, "QUERY",
}

// findRoute returns the documented operation of r, its path parameters and
// its path template. When only the method is not documented, it returns a
// nil route and the path template; when the path is not documented, a nil
// route and "".
func (v *Validator) findRoute(r *http.Request) (*routers.Route, map[string]string, string) {
	path := r.URL.EscapedPath()
	for _, base := range v.basePaths {
		if rest, ok := strings.CutPrefix(path, base); ok && strings.HasPrefix(rest, "/") {
			path = rest
			break
		}
	}
	// The router matches the decoded path, where an escaped slash inside a
	// path parameter ("/users/a%2Fb") would split it; route on the decoded
	// segments with such slashes hidden, and restore them in the parameters.
	segments := strings.Split(path, "/")
	for i, s := range segments {
		if dec, err := url.PathUnescape(s); err == nil {
			segments[i] = strings.ReplaceAll(dec, "/", hiddenSlash)
		}
	}
	probe := *r
	u := *r.URL
	u.Path, u.RawPath = strings.Join(segments, "/"), ""
	probe.URL = &u
	probe.Method = strings.ToUpper(r.Method)
	if route, params, err := v.router.FindRoute(&probe); err == nil {
		for k, p := range params {
			params[k] = strings.ReplaceAll(p, hiddenSlash, "/")
		}
		return route, params, route.Path
	}
	for _, m := range methods {
		probe.Method = m
		if route, _, err := v.router.FindRoute(&probe); err == nil {
			return nil, nil, route.Path
		}
	}
	return nil, nil, ""
}

// hiddenSlash stands for an escaped slash in a path segment while routing.
const hiddenSlash = "\x00"

// responseExtras checks what the library leaves out: a body on a response
// documented without content, an empty body or a JSON null where the
// document defines JSON content, and undocumented members of JSON objects.
func responseExtras(doc *openapi3.Response, resp *http.Response, body []byte) []string {
	if doc == nil {
		return nil
	}
	if len(doc.Content) == 0 {
		if len(bytes.TrimSpace(body)) > 0 {
			return []string{fmt.Sprintf("the response is documented without a body, but has %d bytes (Content-Type %q)", len(body), resp.Header.Get("Content-Type"))}
		}
		return nil
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || !isJSON(mt) {
		return nil
	}
	media := doc.Content.Get(mt)
	if media == nil || media.Schema == nil {
		return nil
	}
	schema := media.Schema.Value
	if len(bytes.TrimSpace(body)) == 0 {
		return []string{fmt.Sprintf("the response body is empty, but the document defines %s content for it", mt)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var value any
	if err := dec.Decode(&value); err != nil {
		return nil // the library has reported it
	}
	if value == nil && schema != nil && schema.Type != nil && len(*schema.Type) > 0 && !schema.Type.Includes("null") {
		return []string{fmt.Sprintf("the response body is JSON null, but the schema allows only %s", strings.Join(*schema.Type, ", "))}
	}
	var out []string
	undocumentedMembers(schema, value, "$", 0, &out)
	return out
}

func isJSON(mediaType string) bool {
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}

// responseFor returns the response key of op that documents status: the
// code itself, its range ("4XX"), or "default".
func responseFor(op *openapi3.Operation, status int) (string, bool) {
	if op == nil || op.Responses == nil {
		return "", false
	}
	code := strconv.Itoa(status)
	if op.Responses.Value(code) != nil {
		return code, true
	}
	rng := fmt.Sprintf("%dXX", status/100)
	for key := range op.Responses.Map() {
		if strings.EqualFold(key, rng) {
			return key, true
		}
	}
	if op.Responses.Value("default") != nil {
		return "default", true
	}
	return "", false
}

func documentedResponse(op *openapi3.Operation, key string) *openapi3.Response {
	if ref := op.Responses.Value(key); ref != nil {
		return ref.Value
	}
	return nil
}

// errorLines renders the errors of openapi3filter one a line: each
// parameter, body or header problem, and each failing value of a schema
// error with its location and the schema keyword that failed.
func errorLines(err error) []string {
	switch e := err.(type) {
	case openapi3.MultiError:
		var out []string
		for _, sub := range e {
			out = append(out, errorLines(sub)...)
		}
		return out
	case *openapi3filter.SecurityRequirementsError:
		var out []string
		for _, sub := range e.Errors {
			out = append(out, errorLines(sub)...)
		}
		return out
	case *openapi3filter.RequestError:
		what := e.Reason
		switch {
		case e.Parameter != nil:
			what = strings.TrimSuffix(fmt.Sprintf("parameter %q in %s: %s", e.Parameter.Name, e.Parameter.In, e.Reason), ": ")
		case e.RequestBody != nil:
			what = strings.TrimSuffix("request body: "+e.Reason, ": ")
		}
		return withCause(what, e.Err)
	case *openapi3filter.ResponseError:
		return withCause(e.Reason, e.Err)
	case *openapi3.SchemaError:
		return schemaErrorLines(e)
	}
	return []string{err.Error()}
}

func withCause(what string, cause error) []string {
	if cause == nil {
		return []string{what}
	}
	lines := errorLines(cause)
	if what == "" {
		return lines
	}
	for i, l := range lines {
		if l != what {
			lines[i] = what + ": " + l
		}
	}
	return lines
}

// schemaErrorLines renders a schema error: one line per failing keyword of
// a JSON Schema 2020-12 error, or the reason at the value's location.
func schemaErrorLines(e *openapi3.SchemaError) []string {
	var multi openapi3.MultiError
	if e.Origin != nil && errors.As(e.Origin, &multi) {
		var out []string
		for _, sub := range multi {
			out = append(out, errorLines(sub)...)
		}
		return out
	}
	var verr *jsonschema.ValidationError
	if e.Origin == nil && errors.As(e, &verr) {
		root := verr.BasicOutput()
		units := root.Errors
		if len(units) == 0 {
			units = []jsonschema.OutputUnit{*root}
		}
		var out []string
		for _, u := range units {
			if u.Error == nil {
				continue
			}
			line := fmt.Sprintf("at $%s: %s", u.InstanceLocation, u.Error)
			if u.KeywordLocation != "" {
				line += " (schema " + u.KeywordLocation + ")"
			}
			out = append(out, line)
		}
		if len(out) > 0 {
			return out
		}
	}
	where := "$"
	if p := e.JSONPointer(); len(p) > 0 {
		where += "/" + strings.Join(p, "/")
	}
	line := fmt.Sprintf("at %s: %s", where, e.Reason)
	if e.SchemaField != "" {
		line += " (schema " + e.SchemaField + ")"
	}
	return []string{line}
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
