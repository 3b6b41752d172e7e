package web_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/web"
)

func TestParseCORSOrigins(t *testing.T) {
	got, err := web.ParseCORSOrigins([]string{" https://App.Example.com/ ", "http://localhost:3000", "https://x.example:443", "http://y.example:80", ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://app.example.com", "http://localhost:3000", "https://x.example", "http://y.example"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, err := web.ParseCORSOrigins([]string{"*"}); err != nil || !slices.Equal(got, []string{"*"}) {
		t.Errorf(`"*": %q, %v`, got, err)
	}
	if got, err := web.ParseCORSOrigins(nil); err != nil || len(got) != 0 {
		t.Errorf("none: %q, %v", got, err)
	}
	for _, bad := range [][]string{
		{"*", "https://app.example"},
		{"app.example"},
		{"ftp://app.example"},
		{"https://"},
		{"https://app.example/path"},
		{"https://app.example?x=1"},
		{"https://app.example#top"},
		{"https://user@app.example"},
		{"https://app.example:notaport"},
	} {
		if got, err := web.ParseCORSOrigins(bad); err == nil {
			t.Errorf("%q accepted as %q", bad, got)
		}
	}
}

// corsApp is an API with a route that counts its calls, one that fails
// with a Retry-After and one behind a bearer, with the given CORS origins.
func corsApp(origins []string, calls *atomic.Int64) func(web.Config) http.Handler {
	return func(cfg web.Config) http.Handler {
		cfg.CORSOrigins = origins
		e := web.New(cfg)
		e.POST("/things", func(c *echo.Context) error {
			calls.Add(1)
			c.Response().Header().Set("Location", "/things/1")
			return c.JSON(http.StatusCreated, map[string]string{"id": "1"})
		})
		e.GET("/busy", func(*echo.Context) error { return problem.TooManyRequests("Too many attempts.", 90) })
		e.GET("/me", func(*echo.Context) error { return problem.InvalidToken("No bearer token.") })
		return e
	}
}

func request(method, target string, headers ...string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(`{}`))
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	return r
}

// corsHeaders are the response headers of CORS, by their canonical names.
func corsHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for name := range h {
		if strings.HasPrefix(name, "Access-Control-") {
			out[name] = h.Get(name)
		}
	}
	return out
}

func TestCORSAllowedOrigin(t *testing.T) {
	const origin = "https://app.example"
	var calls atomic.Int64
	build := corsApp([]string{"https://APP.example/"}, &calls)

	t.Run("preflight", func(t *testing.T) {
		got := serve(t, build, request(http.MethodOptions, "/things",
			"Origin", origin, "Access-Control-Request-Method", "PATCH",
			"Access-Control-Request-Headers", "authorization,content-type,if-match,idempotency-key"))
		if got.status != http.StatusNoContent {
			t.Fatalf("status %d", got.status)
		}
		h := got.headers
		if h.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("Allow-Origin %q", h.Get("Access-Control-Allow-Origin"))
		}
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			if !listHas(h.Get("Access-Control-Allow-Methods"), m) {
				t.Errorf("Allow-Methods %q lacks %s", h.Get("Access-Control-Allow-Methods"), m)
			}
		}
		for _, name := range []string{"Authorization", "Content-Type", "If-Match", "Idempotency-Key", "Last-Event-ID"} {
			if !listHas(h.Get("Access-Control-Allow-Headers"), name) {
				t.Errorf("Allow-Headers %q lacks %s", h.Get("Access-Control-Allow-Headers"), name)
			}
		}
		if h.Get("Access-Control-Allow-Credentials") != "" {
			t.Error("credentials allowed")
		}
		if h.Get("Access-Control-Max-Age") == "" {
			t.Error("no Max-Age")
		}
		if !listHas(strings.Join(h.Values("Vary"), ","), "Origin") {
			t.Errorf("Vary %q", h.Values("Vary"))
		}
		if calls.Load() != 0 {
			t.Error("a preflight ran the handler")
		}
		// Logged and counted once, like every response.
		if len(got.logs) != 1 || got.logs[0]["status"] != float64(204) || got.logs[0]["method"] != "OPTIONS" {
			t.Errorf("logs %v", got.logs)
		}
		if len(got.series) != 1 || got.series["/things OPTIONS 204"] != 1 {
			t.Errorf("series %v", got.series)
		}
	})

	t.Run("preflight of an unknown route", func(t *testing.T) {
		// Answered, so that the page reads the 404 of the request itself.
		got := serve(t, build, request(http.MethodOptions, "/nowhere", "Origin", origin, "Access-Control-Request-Method", "GET"))
		if got.status != http.StatusNoContent || got.headers.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("%d %v", got.status, got.headers)
		}
		if got.series["unmatched OPTIONS 204"] != 1 {
			t.Errorf("series %v", got.series)
		}
	})

	for _, tc := range []struct {
		name   string
		req    *http.Request
		status int
	}{
		{"created", request(http.MethodPost, "/things", "Origin", origin, "Content-Type", "application/json"), http.StatusCreated},
		{"429", request(http.MethodGet, "/busy", "Origin", origin), http.StatusTooManyRequests},
		{"401", request(http.MethodGet, "/me", "Origin", origin), http.StatusUnauthorized},
		{"404", request(http.MethodGet, "/nowhere", "Origin", origin), http.StatusNotFound},
		{"405", request(http.MethodDelete, "/things", "Origin", origin), http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := serve(t, build, tc.req)
			if got.status != tc.status {
				t.Fatalf("status %d, want %d", got.status, tc.status)
			}
			h := got.headers
			if h.Get("Access-Control-Allow-Origin") != origin || h.Get("Access-Control-Allow-Credentials") != "" {
				t.Errorf("CORS headers %v", corsHeaders(h))
			}
			for _, name := range []string{"Link", "ETag", "Location", "Idempotent-Replayed", "Retry-After", "X-Request-ID"} {
				if !listHas(h.Get("Access-Control-Expose-Headers"), name) {
					t.Errorf("Expose-Headers %q lacks %s", h.Get("Access-Control-Expose-Headers"), name)
				}
			}
			if len(got.logs) != 1 || len(got.series) != 1 {
				t.Errorf("logs %v, series %v", got.logs, got.series)
			}
		})
	}
}

// An origin not allowed, or no CORS configuration, gets exactly the
// answer of a request without Origin: no CORS header, the same status and
// headers, and a preflight that runs no handler.
func TestCORSDisallowedOriginChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		origins []string
	}{
		{"another origin allowed", []string{"https://app.example"}},
		{"no origin allowed", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, req := range []func(origin string) *http.Request{
				func(o string) *http.Request {
					return request(http.MethodOptions, "/things", "Origin", o, "Access-Control-Request-Method", "POST",
						"Access-Control-Request-Headers", "authorization")
				},
				func(o string) *http.Request {
					return request(http.MethodPost, "/things", "Origin", o, "Content-Type", "application/json")
				},
				func(o string) *http.Request { return request(http.MethodGet, "/busy", "Origin", o) },
				func(o string) *http.Request { return request(http.MethodGet, "/nowhere", "Origin", o) },
			} {
				var withOrigin, without atomic.Int64
				got := serve(t, corsApp(tc.origins, &withOrigin), req("https://evil.example"))
				plain := req("")
				plain.Header.Del("Origin")
				want := serve(t, corsApp(tc.origins, &without), plain)
				name := got.logs[0]["method"].(string) + " " + got.logs[0]["route"].(string)
				if len(corsHeaders(got.headers)) != 0 {
					t.Errorf("%s: CORS headers %v", name, corsHeaders(got.headers))
				}
				if got.status != want.status || withOrigin.Load() != without.Load() {
					t.Errorf("%s: status %d and %d calls, without Origin %d and %d calls", name, got.status, withOrigin.Load(), want.status, without.Load())
				}
				for _, h := range []http.Header{got.headers, want.headers} {
					h.Del("X-Request-ID")
				}
				if !equalHeaders(got.headers, want.headers) {
					t.Errorf("%s: headers %v, without Origin %v", name, got.headers, want.headers)
				}
				if len(got.logs) != 1 || len(got.series) != 1 {
					t.Errorf("%s: logs %v, series %v", name, got.logs, got.series)
				}
			}
		})
	}
}

// "*" allows every origin, and never with credentials.
func TestCORSAnyOrigin(t *testing.T) {
	var calls atomic.Int64
	build := corsApp([]string{"*"}, &calls)
	for _, req := range []*http.Request{
		request(http.MethodOptions, "/things", "Origin", "https://anyone.example", "Access-Control-Request-Method", "POST"),
		request(http.MethodPost, "/things", "Origin", "http://localhost:5173", "Content-Type", "application/json"),
	} {
		got := serve(t, build, req)
		if got.headers.Get("Access-Control-Allow-Origin") != "*" || got.headers.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s: %d %v", req.Method, got.status, corsHeaders(got.headers))
		}
	}
	if calls.Load() != 1 {
		t.Errorf("%d calls", calls.Load())
	}
}

func TestCORSInvalidConfigurationPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	web.New(web.Config{CORSOrigins: []string{"app.example"}})
}

// listHas reports whether the comma-separated header value list holds
// name, case-insensitively.
func listHas(list, name string) bool {
	for v := range strings.SplitSeq(list, ",") {
		if strings.EqualFold(strings.TrimSpace(v), name) {
			return true
		}
	}
	return false
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
