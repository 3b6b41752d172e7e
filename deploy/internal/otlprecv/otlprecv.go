// Package otlprecv is a small OTLP/HTTP trace receiver: what the
// services' exporters send to /v1/traces (protobuf or JSON, gzipped or
// not), decoded with the OTLP protocol's own Go types into flat spans. The
// end-to-end tests collect spans with it on loopback, and make run prints
// them.
package otlprecv

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	Kind                      string // server, client, internal, …
	Service                   string // the resource's service.name
	Start, End                time.Time
	// Attributes are the span's attributes, each value as text.
	Attributes map[string]string
	// Links name other spans: TraceID and SpanID.
	Links []Link
	// Failed is the span's status: error.
	Failed bool
}

// Link is a span link.
type Link struct{ TraceID, SpanID string }

// Receiver is the http.Handler of POST /v1/traces. Each batch it accepts
// goes to OnSpans, when set, and is kept for Spans unless Discard.
type Receiver struct {
	OnSpans func([]Span)
	// Discard keeps nothing (a long benchmark run).
	Discard bool
	// Count, when set, is told how many spans each batch held. With
	// Discard and no OnSpans, the spans are then decoded but not
	// flattened: a benchmark's receiver shares the cores with the
	// service it measures, and a collector does no more.
	Count func(spans int)

	mu    sync.Mutex
	spans []Span
}

// Spans returns every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// ServeHTTP accepts one export request.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "POST /v1/traces only", http.StatusNotFound)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, 16<<20)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, "bad gzip", http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	var export coltrace.ExportTraceServiceRequest
	jsonBody := strings.HasPrefix(req.Header.Get("Content-Type"), "application/json")
	if jsonBody {
		err = protojson.Unmarshal(data, &export)
	} else {
		err = proto.Unmarshal(data, &export)
	}
	if err != nil {
		http.Error(w, "cannot decode: "+err.Error(), http.StatusBadRequest)
		return
	}
	if r.Count != nil {
		r.Count(countSpans(&export))
	}
	if !r.Discard || r.OnSpans != nil {
		spans := Flatten(&export)
		if !r.Discard {
			r.mu.Lock()
			r.spans = append(r.spans, spans...)
			r.mu.Unlock()
		}
		if r.OnSpans != nil {
			r.OnSpans(spans)
		}
	}
	var resp []byte
	if jsonBody {
		w.Header().Set("Content-Type", "application/json")
		resp, _ = protojson.Marshal(&coltrace.ExportTraceServiceResponse{})
	} else {
		w.Header().Set("Content-Type", "application/x-protobuf")
		resp, _ = proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	}
	_, _ = w.Write(resp)
}

// Flatten returns the spans of an export request.
func Flatten(export *coltrace.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range export.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = text(kv.GetValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Name: s.GetName(), Service: service,
					Kind:       strings.ToLower(strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_")),
					Start:      time.Unix(0, int64(s.GetStartTimeUnixNano())),
					End:        time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attributes: map[string]string{},
					Failed:     s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				}
				if len(s.GetParentSpanId()) > 0 {
					sp.ParentID = hex.EncodeToString(s.GetParentSpanId())
				}
				for _, kv := range s.GetAttributes() {
					sp.Attributes[kv.GetKey()] = text(kv.GetValue())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
				}
				out = append(out, sp)
			}
		}
	}
	return out
}

// countSpans is the number of spans of an export request.
func countSpans(export *coltrace.ExportTraceServiceRequest) int {
	n := 0
	for _, rs := range export.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	return n
}

// text is an attribute value as text.
func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_BytesValue:
		return hex.EncodeToString(x.BytesValue)
	case *commonpb.AnyValue_ArrayValue:
		parts := make([]string, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, text(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	default:
		return ""
	}
}
