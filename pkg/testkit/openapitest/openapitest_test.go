package openapitest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/acme/platform/pkg/testkit/openapitest"
)

// testSpec is a tiny OpenAPI 3.1 document exercising what the helper checks.
const testSpec = `
openapi: 3.1.0
info:
  title: items
  version: "1"
servers:
  - url: http://localhost:8080
paths:
  /items:
    post:
      operationId: createItem
      requestBody:
        required: true
        content:
          application/json:
            schema:
              $ref: '#/components/schemas/ItemInput'
      responses:
        '201':
          description: Created.
          headers:
            Location:
              required: true
              schema:
                type: string
                pattern: ^/items/
          content:
            application/json:
              schema:
                $ref: '#/components/schemas/Item'
        '400':
          $ref: '#/components/responses/Problem'
  /items/{id}:
    parameters:
      - name: id
        in: path
        required: true
        schema:
          type: string
    get:
      operationId: getItem
      security:
        - bearer: []
      responses:
        '200':
          description: The item.
          content:
            application/json:
              schema:
                $ref: '#/components/schemas/Item'
        '401':
          description: No or bad token.
          headers:
            WWW-Authenticate:
              required: true
              schema:
                type: string
          content:
            application/problem+json:
              schema:
                $ref: '#/components/schemas/Problem'
        '404':
          $ref: '#/components/responses/Problem'
    delete:
      operationId: deleteItem
      responses:
        '204':
          description: Deleted.
components:
  securitySchemes:
    bearer:
      type: http
      scheme: bearer
  responses:
    Problem:
      description: An error.
      content:
        application/problem+json:
          schema:
            $ref: '#/components/schemas/Problem'
  schemas:
    ItemInput:
      type: object
      required: [name]
      properties:
        name:
          type: string
          minLength: 1
    Item:
      type: object
      required: [id, name, count, note]
      properties:
        id:
          type: string
        name:
          type: string
        count:
          type: integer
        note:
          type: [string, "null"]
        createdAt:
          type: string
          format: date-time
        labels:
          type: object
          additionalProperties:
            type: string
        tags:
          type: array
          items:
            $ref: '#/components/schemas/Tag'
    Tag:
      type: object
      required: [name]
      properties:
        name:
          type: string
    Problem:
      type: object
      required: [code, status]
      properties:
        code:
          type: string
        status:
          type: integer
`

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB // nil: calling anything not defined below panics
	mu         sync.Mutex
	errors     []string
	fatal      bool
}

type fatalSentinel struct{}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.fatal = true
	panic(fatalSentinel{})
}
func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *recorder) Failed() bool      { return len(r.errors) > 0 }

// record runs fn with a recorder and returns it.
func record(fn func(tb testing.TB)) (r *recorder) {
	r = &recorder{}
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(fatalSentinel); !ok {
				panic(p)
			}
		}
	}()
	fn(r)
	return r
}

// server answers every request with the given status, content type and
// body, and extra headers as "Name: value" strings.
func server(t *testing.T, status int, contentType, body string, headers ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for _, h := range headers {
			name, value, _ := strings.Cut(h, ": ")
			w.Header().Set(name, value)
		}
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newRequest(t *testing.T, method, url, body string, headers ...string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Set(name, value)
	}
	return req
}

const (
	goodItem    = `{"id":"1","name":"a","count":3,"note":null,"createdAt":"2024-05-01T12:00:00Z","labels":{"x":"y"},"tags":[{"name":"t"}]}`
	jsonType    = "application/json"
	problemType = "application/problem+json"
	bearer      = "Authorization: Bearer x.y.z"
	itemsPath   = "/items/1"
)

func TestConformingExchangesPass(t *testing.T) {
	api := openapitest.Load(t, []byte(testSpec))
	cases := []struct {
		name                      string
		method, path, body        string
		reqHeaders                []string
		status                    int
		contentType, respBody     string
		respHeaders               []string
		wantResp                  string
		responseOnly, wantCovered bool
	}{
		{name: "get with null note", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: jsonType, respBody: goodItem},
		{name: "get with string note and charset", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: "application/json; charset=utf-8", respBody: `{"id":"1","name":"a","count":3,"note":"hi"}`},
		{name: "not found", method: "GET", path: "/items/2", reqHeaders: []string{bearer},
			status: 404, contentType: problemType, respBody: `{"code":"not_found","status":404}`},
		{name: "create", method: "POST", path: "/items", body: `{"name":"a","ignored":1}`, reqHeaders: []string{"Content-Type: application/json"},
			status: 201, contentType: jsonType, respBody: goodItem, respHeaders: []string{"Location: /items/1"}},
		{name: "delete", method: "DELETE", path: itemsPath, status: 204},
		{name: "invalid request, response only", method: "POST", path: "/items", body: `{"name":`, reqHeaders: []string{"Content-Type: text/plain"},
			status: 400, contentType: problemType, respBody: `{"code":"malformed_json","status":400}`, responseOnly: true},
		{name: "missing token, response only", method: "GET", path: itemsPath,
			status: 401, contentType: problemType, respBody: `{"code":"invalid_token","status":401}`,
			respHeaders: []string{`WWW-Authenticate: Bearer error="invalid_token"`}, responseOnly: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := server(t, tc.status, tc.contentType, tc.respBody, tc.respHeaders...)
			req := newRequest(t, tc.method, srv.URL+tc.path, tc.body, tc.reqHeaders...)
			var (
				resp *http.Response
				body []byte
			)
			rec := record(func(tb testing.TB) {
				if tc.responseOnly {
					resp, body = api.DoResponseOnly(tb, srv.Client(), req)
				} else {
					resp, body = api.Do(tb, srv.Client(), req)
				}
			})
			if len(rec.errors) > 0 {
				t.Fatalf("conforming exchange was reported:\n%s", strings.Join(rec.errors, "\n"))
			}
			if resp.StatusCode != tc.status || string(body) != tc.respBody {
				t.Fatalf("Do returned %d %q, want %d %q", resp.StatusCode, body, tc.status, tc.respBody)
			}
			again, _ := io.ReadAll(resp.Body)
			if string(again) != tc.respBody {
				t.Fatalf("resp.Body cannot be read again: %q", again)
			}
		})
	}
	cov := api.Coverage()
	if len(cov.Covered) != 6 {
		t.Errorf("coverage: %v", cov)
	}
}

func TestMismatchesFail(t *testing.T) {
	api := openapitest.Load(t, []byte(testSpec))
	cases := []struct {
		name                  string
		method, path, body    string
		reqHeaders            []string
		status                int
		contentType, respBody string
		respHeaders           []string
		responseOnly          bool
		want                  []string // substrings of the reported failure
	}{
		{name: "wrong field type", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: jsonType, respBody: `{"id":"1","name":"a","count":"3","note":null}`,
			want: []string{"GET /items/1 -> 200 (getItem)", "count", "integer"}},
		{name: "wrong type in nested array", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: jsonType, respBody: `{"id":"1","name":"a","count":3,"note":null,"tags":[{"name":7}]}`,
			want: []string{"tags", "name"}},
		{name: "null where the type has no null", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: jsonType, respBody: `{"id":"1","name":null,"count":3,"note":null}`,
			want: []string{"name"}},
		{name: "missing required field", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: jsonType, respBody: `{"id":"1","name":"a","note":null}`,
			want: []string{"count"}},
		{name: "bad date-time format", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: jsonType, respBody: `{"id":"1","name":"a","count":3,"note":null,"createdAt":"yesterday"}`,
			want: []string{"createdAt"}},
		{name: "undocumented member", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: jsonType, respBody: `{"id":"1","name":"a","count":3,"note":null,"secret":"s","tags":[{"name":"t","color":"red"}]}`,
			want: []string{"member $.secret is not documented", "member $.tags[0].color is not documented"}},
		{name: "undocumented status", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 500, contentType: problemType, respBody: `{"code":"internal_error","status":500}`,
			want: []string{"status 500 is not documented for GET /items/{id}"}},
		{name: "undocumented path", method: "GET", path: "/nope", status: 404, contentType: problemType, respBody: `{}`,
			want: []string{"GET /nope -> 404", "the path is not documented"}},
		{name: "undocumented method", method: "PATCH", path: itemsPath, status: 405, contentType: problemType, respBody: `{}`,
			want: []string{"the method PATCH is not documented for /items/{id}"}},
		{name: "undocumented path, response only", method: "GET", path: "/nope", status: 404, responseOnly: true,
			want: []string{"the path is not documented"}},
		{name: "wrong content type", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: "text/plain", respBody: goodItem,
			want: []string{"text/plain"}},
		{name: "problem as plain json", method: "GET", path: "/items/2", reqHeaders: []string{bearer},
			status: 404, contentType: jsonType, respBody: `{"code":"not_found","status":404}`,
			want: []string{"application/json"}},
		{name: "body that is not json", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: jsonType, respBody: `{"id":`,
			want: []string{"response:"}},
		{name: "json null body", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: jsonType, respBody: `null`,
			want: []string{"the response body is JSON null, but the schema allows only object"}},
		{name: "empty body", method: "GET", path: itemsPath, reqHeaders: []string{bearer},
			status: 200, contentType: jsonType, respBody: ``,
			want: []string{"the response body is empty"}},
		{name: "missing required header", method: "POST", path: "/items", body: `{"name":"a"}`, reqHeaders: []string{"Content-Type: application/json"},
			status: 201, contentType: jsonType, respBody: goodItem,
			want: []string{"Location"}},
		{name: "body on a response documented without one", method: "DELETE", path: itemsPath,
			status: 204, contentType: jsonType, respBody: "",
			want: nil}, // an empty 204 with a content type is fine
		{name: "invalid request body", method: "POST", path: "/items", body: `{"name":""}`, reqHeaders: []string{"Content-Type: application/json"},
			status: 400, contentType: problemType, respBody: `{"code":"validation_failed","status":400}`,
			want: []string{"request:", "name"}},
		{name: "wrong request content type", method: "POST", path: "/items", body: `{"name":"a"}`, reqHeaders: []string{"Content-Type: text/plain"},
			status: 400, contentType: problemType, respBody: `{"code":"unsupported_media_type","status":400}`,
			want: []string{"request:", "text/plain"}},
		{name: "missing bearer token", method: "GET", path: itemsPath,
			status: 401, contentType: problemType, respBody: `{"code":"invalid_token","status":401}`, respHeaders: []string{"WWW-Authenticate: Bearer"},
			want: []string{"request:"}},
		{name: "invalid response to an invalid request, response only", method: "POST", path: "/items", body: `{`, reqHeaders: []string{"Content-Type: text/plain"},
			status: 400, contentType: problemType, respBody: `{"code":5,"status":400}`, responseOnly: true,
			want: []string{"code"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // one Validator, used concurrently
			srv := server(t, tc.status, tc.contentType, tc.respBody, tc.respHeaders...)
			req := newRequest(t, tc.method, srv.URL+tc.path, tc.body, tc.reqHeaders...)
			rec := record(func(tb testing.TB) {
				if tc.responseOnly {
					api.DoResponseOnly(tb, srv.Client(), req)
				} else {
					api.Do(tb, srv.Client(), req)
				}
			})
			got := strings.Join(rec.errors, "\n")
			if tc.want == nil {
				if got != "" {
					t.Fatalf("unexpected failure:\n%s", got)
				}
				return
			}
			if len(rec.errors) != 1 {
				t.Fatalf("got %d failures, want 1 listing every problem:\n%s", len(rec.errors), got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("failure does not mention %q:\n%s", w, got)
				}
			}
			t.Logf("reported as:\n%s", got)
		})
	}
}

func TestBodyOnResponseDocumentedWithoutOne(t *testing.T) {
	api := openapitest.Load(t, []byte(testSpec))
	req := newRequest(t, "DELETE", "http://localhost:8080/items/1", "")
	resp := &http.Response{StatusCode: 204, Header: http.Header{"Content-Type": {jsonType}}}
	rec := record(func(tb testing.TB) { api.Check(tb, req, nil, resp, []byte(`{"deleted":true}`)) })
	if got := strings.Join(rec.errors, "\n"); !strings.Contains(got, "documented without a body") {
		t.Fatalf("got %q", got)
	}
}

func TestCheckWithServerSideRequest(t *testing.T) {
	// Check also works with requests built for handlers (httptest.NewRequest)
	// and responses from an httptest.ResponseRecorder.
	api := openapitest.Load(t, []byte(testSpec))
	body := `{"name":"a"}`
	req := httptest.NewRequest("POST", "/items", strings.NewReader(body))
	req.Header.Set("Content-Type", jsonType)
	w := httptest.NewRecorder()
	w.Header().Set("Content-Type", jsonType)
	w.Header().Set("Location", "/items/1")
	w.WriteHeader(201)
	_, _ = io.WriteString(w, goodItem)
	rec := record(func(tb testing.TB) { api.Check(tb, req, []byte(body), w.Result(), w.Body.Bytes()) })
	if len(rec.errors) > 0 {
		t.Fatalf("unexpected failure:\n%s", strings.Join(rec.errors, "\n"))
	}
}

func TestAssertAllOperationsCovered(t *testing.T) {
	api := openapitest.Load(t, []byte(testSpec))
	srv := server(t, 204, "", "")
	api.Do(t, srv.Client(), newRequest(t, "DELETE", srv.URL+itemsPath, ""))

	rec := record(func(tb testing.TB) { api.AssertAllOperationsCovered(tb) })
	got := strings.Join(rec.errors, "\n")
	for _, w := range []string{"5 of 6 documented responses were never exercised", "POST /items 201 (createItem)", "POST /items 400", "GET /items/{id} 200 (getItem)", "GET /items/{id} 401", "GET /items/{id} 404"} {
		if !strings.Contains(got, w) {
			t.Errorf("failure does not mention %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "DELETE") {
		t.Errorf("covered response listed as missed:\n%s", got)
	}

	rec = record(func(tb testing.TB) {
		api.AssertAllOperationsCovered(tb, "* /items 201", "post * 400", "GET /items/{id} 4??", "get /items/* 200")
	})
	if len(rec.errors) > 0 {
		t.Errorf("exceptions not applied:\n%s", strings.Join(rec.errors, "\n"))
	}
	rec = record(func(tb testing.TB) { api.AssertAllOperationsCovered(tb, "GET /items") })
	if !rec.fatal {
		t.Errorf("malformed exception accepted")
	}
}

func TestLoadRejectsInvalidDocuments(t *testing.T) {
	cases := []struct {
		name     string
		old, new string // replacement applied to testSpec
		want     string
	}{
		{"not openapi", "openapi: 3.1.0", "swagger: '2.0'", "version"},
		{"missing info", "info:\n  title: items\n  version: \"1\"\n", "", "info"},
		{"unresolved reference", "$ref: '#/components/schemas/Tag'", "$ref: '#/components/schemas/Nope'", "Nope"},
		{"invalid schema keyword value", "type: integer", "type: int", "/components/schemas/Item"},
		{"duplicate operationId", "operationId: deleteItem", "operationId: getItem", `operationId "getItem" is used by 2 operations`},
		{"example that does not match", "minLength: 1", "minLength: 1\n          example: \"\"", "example /components/schemas/ItemInput/properties/name/example"},
		{"media type example that does not match", "$ref: '#/components/schemas/ItemInput'", "$ref: '#/components/schemas/ItemInput'\n            example: {name: 5}", "example /paths/~1items/post/requestBody/content/application~1json/example"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := strings.Replace(testSpec, tc.old, tc.new, 1)
			if spec == testSpec {
				t.Fatalf("replacement %q not applied", tc.old)
			}
			rec := record(func(tb testing.TB) { openapitest.Load(tb, []byte(spec)) })
			got := strings.Join(rec.errors, "\n")
			if !rec.fatal || !strings.Contains(got, tc.want) {
				t.Fatalf("Load reported %q, want a fatal failure mentioning %q", got, tc.want)
			}
			if err := openapitest.ValidateDocument([]byte(spec)); err == nil {
				t.Fatalf("ValidateDocument accepted the document")
			}
			t.Logf("reported as:\n%s", got)
		})
	}
	if err := openapitest.ValidateDocument([]byte(testSpec)); err != nil {
		t.Fatalf("valid document rejected: %v", err)
	}
}
