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
	"google.golang.org/protobuf/encoding/protowire"
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
	// Discard and no OnSpans, a protobuf batch is then only walked to
	// count its spans, not decoded: a benchmark's receiver shares the
	// cores with the service it measures, where a collector would run on
	// a machine of its own.
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
	jsonBody := strings.HasPrefix(req.Header.Get("Content-Type"), "application/json")
	if !jsonBody && r.Discard && r.OnSpans == nil && r.Count != nil {
		n, err := countWireSpans(data)
		if err != nil {
			http.Error(w, "cannot decode: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Count(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		return // an empty ExportTraceServiceResponse is no bytes
	}
	var export coltrace.ExportTraceServiceRequest
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

// countWireSpans counts the spans of a protobuf ExportTraceServiceRequest
// without decoding it: the length-delimited fields resource_spans (1),
// their scope_spans (2) and those's spans (2).
func countWireSpans(data []byte) (int, error) {
	n := 0
	err := eachField(data, 1, func(resource []byte) error {
		return eachField(resource, 2, func(scope []byte) error {
			return eachField(scope, 2, func([]byte) error { n++; return nil })
		})
	})
	return n, err
}

// eachField calls f with the bytes of every length-delimited field
// number num of the message b, skipping the others.
func eachField(b []byte, num protowire.Number, f func([]byte) error) error {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return protowire.ParseError(l)
			}
			if err := f(v); err != nil {
				return err
			}
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
	}
	return nil
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
