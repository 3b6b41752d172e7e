// Package tracingtest checks that no span holds a secret: a test binary
// records every span its tests make (Install), its servers note every
// credential their requests and responses carry (Secrets.Handler), and
// Checked fails the binary when any span's name, attribute, event or
// status holds one of them.
package tracingtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/acme/platform/pkg/tracing"
)

// Install makes tracing record every span of the process, always
// sampled, into the recorder it returns.
func Install() *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec)))
	return rec
}

// Record is Install for one test: tracing is off again when it ends.
func Record(t testing.TB) *tracetest.SpanRecorder {
	rec := Install()
	t.Cleanup(tracing.Off)
	return rec
}

// Secrets are the credentials seen by the handlers it wraps.
type Secrets struct {
	mu     sync.Mutex
	values map[string]bool
}

// minSecret is the shortest value taken for a secret: shorter ones (a
// test's "x") would match by chance.
const minSecret = 8

// Add notes values as secrets.
func (s *Secrets) Add(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.values == nil {
		s.values = map[string]bool{}
	}
	for _, v := range values {
		if len(v) >= minSecret {
			s.values[v] = true
		}
	}
}

// Count is how many secrets were noted.
func (s *Secrets) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.values)
}

// Handler wraps h, noting the credentials of each exchange: the
// Authorization header (a bearer token, a Basic password), and every
// field of a JSON or form body, sent or answered, of the request's query
// and of the redirect's (Location) whose name holds "password", "secret"
// or "token", or is an authorization code or its verifier.
func (s *Secrets) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok {
			s.Add(cred)
			if strings.EqualFold(scheme, "Basic") {
				if dec, err := base64.StdEncoding.DecodeString(cred); err == nil {
					_, pw, _ := strings.Cut(string(dec), ":")
					s.Add(pw)
				}
			}
		}
		s.fromQuery(r.URL.RawQuery)
		if r.Body != nil {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			s.fromBody(r.Header.Get("Content-Type"), body)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(&tee{ResponseWriter: w, copy: rec}, r)
		s.fromBody(w.Header().Get("Content-Type"), rec.Body.Bytes())
		if loc, err := url.Parse(w.Header().Get("Location")); err == nil {
			s.fromQuery(loc.RawQuery)
		}
	})
}

func (s *Secrets) fromQuery(raw string) {
	q, _ := url.ParseQuery(raw)
	for k, vs := range q {
		if secretName(k) {
			s.Add(vs...)
		}
	}
}

// tee writes a response to the client and keeps a copy of its body.
type tee struct {
	http.ResponseWriter
	copy *httptest.ResponseRecorder
}

func (t *tee) Write(b []byte) (int, error) {
	t.copy.Write(b)
	return t.ResponseWriter.Write(b)
}

func (t *tee) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (s *Secrets) fromBody(contentType string, body []byte) {
	switch {
	case strings.HasPrefix(contentType, "application/x-www-form-urlencoded"):
		s.fromQuery(string(body))
	case strings.Contains(contentType, "json"):
		var v any
		if json.Unmarshal(body, &v) == nil {
			s.fromJSON("", v)
		}
	}
}

func (s *Secrets) fromJSON(name string, v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			s.fromJSON(k, e)
		}
	case []any:
		for _, e := range x {
			s.fromJSON(name, e)
		}
	case string:
		if secretName(name) {
			s.Add(x)
		}
	}
}

// secretName: a field that carries a credential (password, currentPassword,
// client_secret, secret, access_token, idToken, refresh_token, …), not
// one that describes it (token_type).
func secretName(name string) bool {
	n := strings.ToLower(name)
	if n == "token_type" || n == "tokentype" {
		return false
	}
	return strings.Contains(n, "password") || strings.Contains(n, "secret") || strings.Contains(n, "token") ||
		n == "code" || n == "code_verifier"
}

// Leaks lists, for each span that holds a secret anywhere (name,
// attributes, events, links, status), where.
func (s *Secrets) Leaks(spans []sdktrace.ReadOnlySpan) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	check := func(span, where, text string) {
		for v := range s.values {
			if strings.Contains(text, v) {
				out = append(out, fmt.Sprintf("span %q: %s holds a secret", span, where))
				return
			}
		}
	}
	attrs := func(span, where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			check(span, where+" attribute "+string(kv.Key), kv.Value.String())
		}
	}
	for _, sp := range spans {
		name := sp.Name()
		check(name, "the name", name)
		check(name, "the status", sp.Status().Description)
		attrs(name, "", sp.Attributes())
		for _, e := range sp.Events() {
			check(name, "event", e.Name)
			attrs(name, "event "+e.Name, e.Attributes)
		}
		for _, l := range sp.Links() {
			attrs(name, "link", l.Attributes)
		}
		attrs(name, "resource", sp.Resource().Attributes())
	}
	sort.Strings(out)
	return out
}

// Runner is what a TestMain runs: *testing.M.
type Runner interface{ Run() int }

// Checked runs m, then fails (exit code 1) when the spans recorded hold
// any of secrets, or when the tests made spans but noted no secret (the
// handlers were not wrapped: the check would prove nothing). Tests that
// made no span (a -run of unit tests) have nothing to check.
func Checked(m Runner, rec *tracetest.SpanRecorder, secrets *Secrets) Runner {
	return runFunc(func() int {
		code := m.Run()
		if code != 0 {
			return code
		}
		spans := rec.Ended()
		leaks := secrets.Leaks(spans)
		switch {
		case len(spans) == 0:
			return 0
		case secrets.Count() == 0:
			fmt.Fprintf(os.Stderr, "tracingtest: %d spans and %d secrets recorded: nothing checked\n", len(spans), secrets.Count())
			return 1
		case len(leaks) > 0:
			fmt.Fprintf(os.Stderr, "tracingtest: secrets in spans:\n  %s\n", strings.Join(leaks, "\n  "))
			return 1
		}
		return 0
	})
}

type runFunc func() int

func (f runFunc) Run() int { return f() }
