package web_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/pkg/web"
)

// observed is what one request left behind: the status the client got,
// the access log line, and the metric series it was counted in.
type observed struct {
	status  int
	body    problemBody
	headers http.Header
	logs    []map[string]any
	series  map[string]float64 // "route method status" → count
}

type problemBody struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// series gathers http_request_duration_seconds from reg.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "http_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["route"]+" "+labels["method"]+" "+labels["status"]] = float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out
}

// serve sends req to a fresh handler made by build and returns what it
// left behind.
func serve(t *testing.T, build func(web.Config) http.Handler, req *http.Request) observed {
	t.Helper()
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	h := build(web.Config{
		Logger:  slogJSON(logs),
		Metrics: reg,
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	o := observed{status: rec.Code, headers: rec.Header(), logs: logs.lines(t), series: series(t, reg)}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), problem.ContentType) {
		if err := json.Unmarshal(rec.Body.Bytes(), &o.body); err != nil {
			t.Fatalf("problem body %q: %v", rec.Body, err)
		}
	}
	return o
}

type loginInput struct {
	Username string `json:"username"`
}

// app is an API with one route for every way a request can fail.
func app(v *token.Verifier) func(web.Config) http.Handler {
	return func(cfg web.Config) http.Handler {
		e := web.New(cfg)
		e.POST("/things", func(c *echo.Context) error {
			var in loginInput
			if err := web.DecodeJSON(c, 64, &in); err != nil {
				return err
			}
			if in.Username == "" {
				return &validation.Error{Fields: []validation.Field{{Name: "username", Reason: "is required"}}}
			}
			return c.JSON(http.StatusCreated, in)
		})
		e.GET("/me", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) }, token.Middleware(v))
		e.GET("/busy", func(*echo.Context) error {
			return problem.TooManyRequests("Too many attempts.", 90)
		})
		e.GET("/database", func(*echo.Context) error {
			// What pkg/mongoconn makes of a driver error when the server
			// cannot be reached.
			return fmt.Errorf("find things: %w", errors.Join(problem.ErrUnavailable, errors.New("server selection timeout")))
		})
		e.GET("/panic", func(*echo.Context) error { panic("boom") })
		e.GET("/broken", func(*echo.Context) error { return errors.New("a bug") })
		return e
	}
}

// foreignToken is a well-formed token signed by a key the verifier of the
// test has not fetched yet.
func foreignToken(t *testing.T) string {
	t.Helper()
	return tokentest.StrangerOf(t, token.AlgEdDSA, "https://issuer.example", []string{"aud"}, token.Subject{UserID: "u", AccountID: "a"}).AccessToken
}

func TestEveryStatusIsTheSameForClientLogAndMetrics(t *testing.T) {
	verifier, err := token.NewVerifier(token.KeyringKeySet(token.StaticKeyring(nil)),
		token.VerifierConfig{Issuer: "https://issuer.example", Audience: []string{"aud"}})
	if err != nil {
		t.Fatal(err)
	}
	build := app(verifier)
	body := func(method, target, contentType, body string) *http.Request {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		return r
	}
	withBearer := func(r *http.Request, v string) *http.Request { r.Header.Set("Authorization", v); return r }

	for _, tc := range []struct {
		name   string
		req    *http.Request
		status int
		code   string
		route  string
		level  string
		method string // the metric's method label, when not the request's
	}{
		{"created", body("POST", "/things", "application/json", `{"username":"a"}`), 201, "", "/things", "INFO", ""},
		{"400 validation", body("POST", "/things", "application/json", `{}`), 400, problem.CodeValidationFailed, "/things", "INFO", ""},
		{"400 malformed JSON", body("POST", "/things", "application/json", `{"username":`), 400, problem.CodeMalformedJSON, "/things", "INFO", ""},
		{"401 bearer missing", body("GET", "/me", "", ""), 401, problem.CodeInvalidToken, "/me", "INFO", ""},
		{"401 bearer malformed", withBearer(body("GET", "/me", "", ""), "Bearer x.y.z"), 401, problem.CodeInvalidToken, "/me", "INFO", ""},
		{"404 route", body("GET", "/nowhere", "", ""), 404, problem.CodeNotFound, "unmatched", "INFO", ""},
		{"405 method", body("DELETE", "/things", "", ""), 405, problem.CodeMethodNotAllowed, "/things", "INFO", ""},
		{"405 invented method", body("BREW", "/things", "", ""), 405, problem.CodeMethodNotAllowed, "/things", "INFO", "other"},
		{"413 body too large", body("POST", "/things", "application/json", `{"username":"`+strings.Repeat("a", 100)+`"}`), 413, problem.CodeBodyTooLarge, "/things", "INFO", ""},
		{"415 not JSON", body("POST", "/things", "text/plain", `username=a`), 415, problem.CodeUnsupportedMediaType, "/things", "INFO", ""},
		{"429 throttled", body("GET", "/busy", "", ""), 429, problem.CodeTooManyRequests, "/busy", "INFO", ""},
		{"503 database down", body("GET", "/database", "", ""), 503, problem.CodeUnavailable, "/database", "WARN", ""},
		{"503 no signing keys", withBearer(body("GET", "/me", "", ""), "Bearer "+foreignToken(t)), 503, problem.CodeUnavailable, "/me", "WARN", ""},
		{"500 handler panic", body("GET", "/panic", "", ""), 500, problem.CodeInternal, "/panic", "ERROR", ""},
		{"500 unexpected error", body("GET", "/broken", "", ""), 500, problem.CodeInternal, "/broken", "ERROR", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := serve(t, build, tc.req)
			if got.status != tc.status {
				t.Fatalf("client got %d, want %d", got.status, tc.status)
			}
			if tc.code != "" && (got.body.Code != tc.code || got.body.Status != tc.status) {
				t.Errorf("problem %+v, want %d %s", got.body, tc.status, tc.code)
			}
			if len(got.logs) != 1 {
				t.Fatalf("%d log lines, want 1: %v", len(got.logs), got.logs)
			}
			line := got.logs[0]
			if line["status"] != float64(tc.status) || line["level"] != tc.level || line["route"] != tc.route {
				t.Errorf("log line status %v level %v route %v; want %d %s %s", line["status"], line["level"], line["route"], tc.status, tc.level, tc.route)
			}
			if id, _ := line["request_id"].(string); id == "" || id != got.headers.Get(web.HeaderRequestID) {
				t.Errorf("log request_id %q, response X-Request-ID %q", id, got.headers.Get(web.HeaderRequestID))
			}
			method := tc.method
			if method == "" {
				method = tc.req.Method
			}
			want := tc.route + " " + method + " " + strconv.Itoa(tc.status)
			if len(got.series) != 1 || got.series[want] != 1 {
				t.Errorf("metric series %v, want exactly {%s: 1}", got.series, want)
			}
			if tc.status >= 500 {
				if _, ok := line["error"]; !ok {
					t.Errorf("a %d log line without its cause: %v", tc.status, line)
				}
			} else if _, ok := line["error"]; ok {
				t.Errorf("a %d log line with an error: %v", tc.status, line)
			}
			if tc.name == "500 handler panic" && !strings.Contains(fmt.Sprint(line["stack"]), "observe_test.go") {
				t.Errorf("panic logged without its stack: %v", line["stack"])
			}
			if tc.status == 429 || tc.status == 503 {
				if got.headers.Get("Retry-After") == "" {
					t.Error("no Retry-After")
				}
			}
		})
	}
}

// Before the service is ready, Pending answers 503 with the start-up
// Retry-After, and the answer is logged and counted like any other; the
// API that takes over records into the same series.
func TestPendingIsObservedLikeAnyResponse(t *testing.T) {
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	cfg := web.Config{Logger: slogJSON(logs), Metrics: reg}
	pending := web.NewPending(cfg)

	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/anything", nil)
	req.Header.Set(web.HeaderRequestID, "req-starting-1")
	pending.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "2" ||
		rec.Header().Get(web.HeaderRequestID) != "req-starting-1" {
		t.Fatalf("starting: %d, headers %v", rec.Code, rec.Header())
	}

	api := web.New(cfg) // shares the registry: no duplicate registration
	api.GET("/v1/anything", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) })
	pending.Ready(api)
	rec = httptest.NewRecorder()
	pending.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/anything", nil))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("ready: %d", rec.Code)
	}

	lines := logs.lines(t)
	if len(lines) != 2 || lines[0]["status"] != float64(503) || lines[0]["level"] != "WARN" ||
		lines[0]["request_id"] != "req-starting-1" || lines[0]["route"] != web.RouteStarting ||
		lines[1]["status"] != float64(204) {
		t.Errorf("log lines %v", lines)
	}
	want := map[string]float64{web.RouteStarting + " GET 503": 1, "/v1/anything GET 204": 1}
	if got := series(t, reg); len(got) != len(want) || got[web.RouteStarting+" GET 503"] != 1 || got["/v1/anything GET 204"] != 1 {
		t.Errorf("series %v, want %v", got, want)
	}
}
