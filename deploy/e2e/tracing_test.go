package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/acme/platform/deploy/internal/otlprecv"
)

// tracingEnv points a service at an OTLP/HTTP receiver, every request
// sampled, spans sent every 100 ms.
func tracingEnv(endpoint string) []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_SAMPLER=always_on",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}
}

// A message posted with a traceparent is one trace: the request's server
// span, its MongoDB commands, and the webhook attempt it caused, whose
// POST names that trace; the relay round that ordered its event is a
// span linked to it.
func TestTracingFollowsAMessageToItsWebhook(t *testing.T) {
	recv := &otlprecv.Receiver{}
	collector := httptest.NewServer(recv)
	t.Cleanup(collector.Close)

	s := newStack(t)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	s.accountEnv = append(s.accountEnv, tracingEnv(collector.URL)...)
	s.convEnv = append(s.convEnv, webhookEnv(base64.StdEncoding.EncodeToString(key))...)
	s.convEnv = append(s.convEnv, tracingEnv(collector.URL)...)
	s.startAccount(t)
	s.startConversations(t)
	h := hooksAPI{t: t, base: s.convURL, bearer: s.clientToken(t, "webhooks:manage,conversations:read,conversations:write")}
	rcv := newHookReceiver(t, "127.0.0.2", nil)
	h.create(rcv.URL + "/hook")

	alice := s.login(t, "alice").IDToken
	status, _, body := call(t, "POST", s.convURL+"/v1/conversations", alice, `{"subject":"traced"}`)
	if status != 201 {
		t.Fatalf("create conversation: %d %s", status, body)
	}
	var conv struct{ ID string }
	_ = json.Unmarshal(body, &conv)

	// The caller starts the trace: its id is known before the request.
	traceID := randomHex(16)
	req, _ := http.NewRequest("POST", s.convURL+"/v1/conversations/"+conv.ID+"/messages", strings.NewReader(`{"body":"follow me"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+alice)
	req.Header.Set("traceparent", "00-"+traceID+"-"+randomHex(8)+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("post message: %d", resp.StatusCode)
	}

	// The webhook of message.created carries a traceparent of that trace.
	var delivered hookRequest
	waitFor(t, func() bool {
		for _, r := range rcv.got() {
			if strings.Contains(string(r.body), `"type":"message.created"`) {
				delivered = r
				return true
			}
		}
		return false
	}, "the message.created webhook")
	parts := strings.Split(delivered.header.Get("traceparent"), "-")
	if len(parts) != 4 || parts[1] != traceID {
		t.Fatalf("webhook traceparent %q, want one of trace %s", delivered.header.Get("traceparent"), traceID)
	}
	attemptID := parts[2]

	var server, attempt otlprecv.Span
	var commands, rounds []otlprecv.Span
	waitFor(t, func() bool {
		server, attempt, commands, rounds = otlprecv.Span{}, otlprecv.Span{}, nil, nil
		for _, sp := range recv.Spans() {
			switch {
			case sp.TraceID == traceID && sp.Kind == "server":
				server = sp
			case sp.TraceID == traceID && sp.Name == "webhook attempt":
				attempt = sp
			case sp.TraceID == traceID && sp.Attributes["db.system.name"] == "mongodb":
				commands = append(commands, sp)
			case sp.Name == "relay round" && slices.ContainsFunc(sp.Links, func(l otlprecv.Link) bool { return l.TraceID == traceID }):
				rounds = append(rounds, sp)
			}
		}
		return server.SpanID != "" && attempt.SpanID != "" && len(rounds) > 0 && len(commands) >= 2
	}, "the request's span, its commands, the relay round and the webhook attempt")

	if server.Name != "POST /v1/conversations/{id}/messages" || server.Service != "conversations" ||
		server.Attributes["http.response.status_code"] != "201" || server.Attributes["http.route"] != "/v1/conversations/{id}/messages" {
		t.Errorf("server span %q of %q, attributes %v", server.Name, server.Service, server.Attributes)
	}
	if server.Attributes["enduser.id"] != subject(t, alice) || server.Attributes["acme.account_id"] == "" {
		t.Errorf("server span names no caller: %v", server.Attributes)
	}
	for _, c := range commands {
		if c.ParentID != server.SpanID || c.Kind != "client" || c.Attributes["db.operation.name"] == "" {
			t.Errorf("command span %q (parent %s, kind %s), want a client span under the request's %s", c.Name, c.ParentID, c.Kind, server.SpanID)
		}
	}
	if !slices.ContainsFunc(commands, func(c otlprecv.Span) bool { return c.Name == "insert messages" }) {
		t.Errorf("no span of the message's insert among %d commands", len(commands))
	}
	if attempt.SpanID != attemptID || attempt.Kind != "client" || attempt.Attributes["http.response.status_code"] != "200" ||
		!slices.ContainsFunc(attempt.Links, func(l otlprecv.Link) bool { return l.TraceID == traceID }) {
		t.Errorf("webhook attempt span %+v, want %s, linked to trace %s, answered 200", attempt, attemptID, traceID)
	}
	if attempt.ParentID != server.SpanID {
		t.Errorf("webhook attempt's parent %s, want the request's span %s", attempt.ParentID, server.SpanID)
	}
	for _, r := range rounds {
		if r.TraceID == traceID {
			t.Errorf("relay round inside the request's trace; want a trace of its own linked to it")
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
