package otlprecv

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestCountingReceiverCountsWhatDecodingFinds: a receiver that only
// counts (Discard, Count) counts the spans of a protobuf batch as
// decoding it does, across resources and scopes, and refuses a body that
// is not one.
func TestCountingReceiverCountsWhatDecodingFinds(t *testing.T) {
	span := func(name string) *tracepb.Span {
		return &tracepb.Span{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), Name: name,
			Attributes: []*commonpb.KeyValue{{Key: "k", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "v"}}}}}
	}
	export := &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name"}}},
			ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{span("a"), span("b")}}, {Spans: []*tracepb.Span{span("c")}}}},
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{span("d"), span("e"), span("f")}}}},
	}}
	body, err := proto.Marshal(export)
	if err != nil {
		t.Fatal(err)
	}
	counted := 0
	recv := &Receiver{Discard: true, Count: func(n int) { counted += n }}
	for _, tc := range []struct {
		body   []byte
		status int
		spans  int
	}{
		{body, http.StatusOK, countSpans(export)},
		{[]byte{0x0a, 0xff}, http.StatusBadRequest, 0}, // a field longer than the body
	} {
		counted = 0
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/x-protobuf")
		recv.ServeHTTP(rec, req)
		if rec.Code != tc.status || counted != tc.spans {
			t.Errorf("%x…: %d with %d spans counted, want %d with %d", tc.body[:2], rec.Code, counted, tc.status, tc.spans)
		}
	}
	if countSpans(export) != 6 {
		t.Fatalf("the batch holds %d spans, want 6", countSpans(export))
	}
}
