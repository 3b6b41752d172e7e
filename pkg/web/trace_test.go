package web_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
	"github.com/acme/platform/pkg/tracing/tracingtest"
	"github.com/acme/platform/pkg/web"
)

const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// tracedRequest serves one GET /v1/things/t1 with a bearer token and the
// caller's traceparent, and returns the access log lines and the
// registry.
func tracedRequest(t *testing.T) ([]map[string]any, *prometheus.Registry, string) {
	t.Helper()
	tokens := tokentest.New(t, tokentest.Options{})
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	e := web.New(web.Config{Logger: slogJSON(&logs), Metrics: reg})
	e.GET("/v1/things/:id", func(c *echo.Context) error { return c.NoContent(http.StatusOK) }, token.Middleware(tokens.Verifier))
	bearer := tokens.Mint(t, token.Subject{UserID: "usr_1", AccountID: "acc_1"}).IDToken
	req := httptest.NewRequest(http.MethodGet, "/v1/things/t1", nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	return logs.lines(t), reg, bearer
}

func TestServerSpanPerRequest(t *testing.T) {
	spans := tracingtest.Record(t)
	logs, reg, bearer := tracedRequest(t)

	var server sdktrace.ReadOnlySpan
	names := map[string]bool{}
	for _, sp := range spans.Ended() {
		names[sp.Name()] = true
		if sp.SpanKind() == trace.SpanKindServer {
			server = sp
		}
	}
	if server == nil || !names["token verify"] {
		t.Fatalf("spans %v, want the request's and the token's verification", names)
	}
	if server.Name() != "GET /v1/things/{id}" || server.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q (%v), want the server span of the route template", server.Name(), server.SpanKind())
	}
	if got := server.SpanContext().TraceID().String(); got != callerTrace {
		t.Errorf("trace %s, want the caller's %s", got, callerTrace)
	}
	attrs := map[string]string{}
	for _, kv := range server.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
		if strings.Contains(kv.Value.String(), bearer) {
			t.Errorf("attribute %s holds the token", kv.Key)
		}
	}
	if attrs["http.route"] != "/v1/things/{id}" || attrs["http.response.status_code"] != "200" ||
		attrs["acme.account_id"] != "acc_1" || attrs["enduser.id"] != "usr_1" {
		t.Errorf("attributes %v", attrs)
	}

	if len(logs) != 1 || logs[0]["trace_id"] != callerTrace || logs[0]["span_id"] != server.SpanContext().SpanID().String() {
		t.Errorf("access log %v, want trace_id %s and the span's id", logs, callerTrace)
	}

	if ex := exemplarOf(t, reg); ex == nil || len(ex.GetLabel()) != 1 || ex.GetLabel()[0].GetValue() != callerTrace {
		t.Errorf("exemplar %v, want trace_id %s", ex, callerTrace)
	}
	var text bytes.Buffer
	ops := web.OpsHandler(slogJSON(&text), reg, nil)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	rec := httptest.NewRecorder()
	ops.ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), `# {trace_id="`+callerTrace+`"}`) {
		t.Errorf("/metrics as OpenMetrics shows no exemplar of %s", callerTrace)
	}
}

func TestNoTraceWhenOff(t *testing.T) {
	logs, reg, _ := tracedRequest(t)
	if len(logs) != 1 || logs[0]["trace_id"] != nil || logs[0]["span_id"] != nil {
		t.Errorf("access log %v, want no trace ids with tracing off", logs)
	}
	if ex := exemplarOf(t, reg); ex != nil {
		t.Errorf("exemplar %v with tracing off", ex)
	}
}

// exemplarOf is the exemplar of the request duration histogram, if any.
func exemplarOf(t *testing.T, reg *prometheus.Registry) *dto.Exemplar {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "http_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				if b.GetExemplar() != nil {
					return b.GetExemplar()
				}
			}
		}
	}
	return nil
}
