package clientstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/pkg/problem"
)

// runGoPolicies proves, against both real binaries (the Go suite's: see
// runGoSuite), the behaviours that every client library shares (the
// "Client libraries" table of the top-level README) for the Go client; the
// JS, Python and PHP suites prove the same of theirs. Faults are injected
// in front of the real answers, through the client's own Config.HTTPClient.
func runGoPolicies(t *testing.T, st *stack) {
	env := map[string]string{}
	for _, kv := range st.seed(t, "gopolicies") {
		k, v, _ := strings.Cut(kv, "=")
		env[strings.TrimPrefix(k, "ACME_TEST_")] = v
	}
	config := func(transport http.RoundTripper) client.Config {
		cfg := client.Config{
			AccountURL:       env["ACCOUNT_URL"],
			ConversationsURL: env["CONVERSATIONS_URL"],
			Credentials:      client.Credentials{AccountName: env["ACCOUNT_NAME"], Username: env["USERNAME"], Password: env["PASSWORD"]},
			// No timeout (nil transport: the default one): the client's
			// default one is for production, not a bound the real services
			// on a loaded machine must beat; the test's -timeout bounds a
			// hang.
			HTTPClient: &http.Client{Transport: transport},
		}
		return cfg
	}
	newClient := func(t *testing.T, cfg client.Config) *client.Client {
		t.Helper()
		c, err := client.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()

	t.Run("the ETag after a message", func(t *testing.T) {
		c := newClient(t, config(nil))
		conv, err := c.CreateConversation(ctx, client.NewConversation{Subject: "etag after a message"})
		if err != nil {
			t.Fatal(err)
		}
		created := conv.ETag
		if _, err := c.PostMessage(ctx, conv.ID, client.NewMessage{Body: "moves the ETag"}, client.WithConversation(&conv)); err != nil {
			t.Fatal(err)
		}
		if conv.ETag == "" || conv.ETag == created {
			t.Fatalf("ETag after the message = %q, created with %q: want the new one", conv.ETag, created)
		}
		subject := "after the message"
		if conv, err = c.PatchConversation(ctx, conv, client.ConversationPatch{Subject: &subject}); err != nil {
			t.Fatalf("patch after a message: %v", err)
		}
		// Still conditional: a change by someone else after the message is
		// a 412, not silently overwritten.
		if _, err := c.PostMessage(ctx, conv.ID, client.NewMessage{Body: "another"}, client.WithConversation(&conv)); err != nil {
			t.Fatal(err)
		}
		other := newClient(t, config(nil))
		theirs, err := other.GetConversation(ctx, conv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.PatchConversation(ctx, theirs, client.ConversationPatch{Status: client.StatusSnoozed}); err != nil {
			t.Fatal(err)
		}
		overwrite := "overwrites?"
		if _, err := c.PatchConversation(ctx, conv, client.ConversationPatch{Subject: &overwrite}); !errors.Is(err, client.ErrPreconditionFailed) {
			t.Fatalf("patch over someone else's change: err = %v, want precondition_failed", err)
		}
	})

	t.Run("retries", func(t *testing.T) {
		// A read whose connection is refused once is sent again.
		refused := &faults{fail: func(n int, r *http.Request) fault {
			if r.Method == http.MethodGet && r.URL.Path == "/definitions" && n == 1 {
				return refuse
			}
			return pass
		}}
		defs, err := newClient(t, config(refused)).ListDefinitions(ctx)
		if err != nil || len(defs) != 1 || defs[0].Name != env["DEFINITION_NAME"] {
			t.Fatalf("definitions = %v, %v", defs, err)
		}
		if got := refused.count("GET /definitions"); got != 2 {
			t.Fatalf("%d GET /definitions, want 2", got)
		}

		// A creation whose answer is lost is sent again with its key, and
		// creates one conversation.
		subject := fmt.Sprintf("lost answer %p", refused)
		lost := &faults{fail: func(n int, r *http.Request) fault {
			if r.Method == http.MethodPost && r.URL.Path == "/v1/conversations" && n == 1 {
				return loseAnswer
			}
			return pass
		}}
		c := newClient(t, config(lost))
		conv, err := c.CreateConversation(ctx, client.NewConversation{Subject: subject})
		if err != nil {
			t.Fatal(err)
		}
		keys := lost.keys("POST /v1/conversations")
		if len(keys) != 2 || keys[0] != keys[1] || keys[0] == "" {
			t.Fatalf("Idempotency-Keys sent = %q, want one key twice", keys)
		}
		var mine []string
		for got, err := range c.Conversations(ctx, client.ListOptions{Limit: 100}) {
			if err != nil {
				t.Fatal(err)
			}
			if got.Subject == subject {
				mine = append(mine, got.ID)
			}
		}
		if len(mine) != 1 || mine[0] != conv.ID {
			t.Fatalf("conversations with the subject: %v, want only %s", mine, conv.ID)
		}

		// Bounded, and never a patch.
		always := &faults{fail: func(n int, r *http.Request) fault {
			if r.URL.Path == "/definitions" || r.Method == http.MethodPatch {
				return refuse
			}
			return pass
		}}
		cfg := config(always)
		cfg.MaxRetries = 1
		c = newClient(t, cfg)
		if _, err := c.ListDefinitions(ctx); err == nil {
			t.Fatal("no error")
		}
		if got := always.count("GET /definitions"); got != 2 {
			t.Fatalf("%d GET /definitions with MaxRetries 1, want 2", got)
		}
		conv, err = c.CreateConversation(ctx, client.NewConversation{Subject: "no retried patch"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.PatchConversation(ctx, conv, client.ConversationPatch{Status: client.StatusClosed}); err == nil {
			t.Fatal("no error")
		}
		if got := always.count("PATCH /v1/conversations/" + conv.ID); got != 1 {
			t.Fatalf("%d PATCHes, want 1", got)
		}

		// A 503 is retried after its Retry-After; one that asks for longer
		// than MaxRetryWait comes back at once.
		unavailable := func(retryAfter string) *faults {
			return &faults{fail: func(n int, r *http.Request) fault {
				if r.URL.Path == "/definitions" && (n == 1 || retryAfter != "1") {
					return fault("503 " + retryAfter)
				}
				return pass
			}}
		}
		once := unavailable("1")
		if _, err := newClient(t, config(once)).ListDefinitions(ctx); err != nil || once.count("GET /definitions") != 2 {
			t.Fatalf("after a 503 with Retry-After 1: %v, %d requests", err, once.count("GET /definitions"))
		}
		long := unavailable("60")
		_, err = newClient(t, config(long)).ListDefinitions(ctx)
		var e *client.Error
		if !errors.As(err, &e) || e.Code != client.CodeServiceUnavailable || long.count("GET /definitions") != 1 {
			t.Fatalf("after a 503 with Retry-After 60: %v, %d requests", err, long.count("GET /definitions"))
		}
	})

	t.Run("texts kept as the service wrote them", func(t *testing.T) {
		detail := ""
		for _, password := range []string{"x", "e", "is", "wrong", "password"} {
			cfg := config(nil)
			cfg.Credentials = client.Credentials{AccountName: env["ACCOUNT_NAME"], Username: "nobody-" + randomSecret(t), Password: password}
			err := newClient(t, cfg).Login(ctx)
			var e *client.Error
			if !errors.As(err, &e) || e.Code != client.CodeInvalidCredentials {
				t.Fatalf("password %q: err = %v", password, err)
			}
			if detail == "" {
				detail = e.Detail // every failed login has the same answer
			}
			want := fmt.Sprintf("client: POST /login: 401 invalid_credentials: %s [request id %s]", detail, e.RequestID)
			if e.Detail != detail || err.Error() != want {
				t.Fatalf("password %q: error %q, want %q", password, err, want)
			}
		}
	})

	t.Run("a code constant for every code of docs/errors.md", func(t *testing.T) {
		doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "errors.md"))
		if err != nil {
			t.Fatal(err)
		}
		known := map[string]bool{}
		for _, c := range []string{
			client.CodeMalformedJSON, client.CodeValidationFailed, client.CodeInvalidCredentials, client.CodeInvalidToken,
			client.CodeInsufficientScope, client.CodeNotFound, client.CodeMethodNotAllowed, client.CodeConflict,
			client.CodePreconditionFailed, client.CodeConversationClosed, client.CodeTooManyParticipants,
			client.CodeLastParticipant, client.CodeIdempotencyKeyReused, client.CodeTooManyEndpoints, client.CodeCursorExpired, client.CodeBodyTooLarge,
			client.CodeUnsupportedMediaType, client.CodeTooManyRequests, client.CodeServiceUnavailable,
			client.CodeOverloaded, client.CodeInternal, client.CodeInvalidRequest, client.CodeInvalidClient,
			client.CodeInvalidGrant, client.CodeInvalidScope, client.CodeUnauthorizedClient, client.CodeUnsupportedGrantType,
			client.CodeSlowDown, client.CodeTemporarilyUnavailable, client.CodeServerError,
			client.CodeMalformedRequest, client.CodeUnsupportedTransferEncoding, client.CodeHeadersTooLarge, client.CodeRequestTimeout,
			client.CodeWeakPassword, client.CodeUsernameTaken, client.CodeInvalidCurrentPassword, client.CodeInvalidCSRFToken,
			client.CodeMFARequired, client.CodeInvalidOTP, client.CodeMFAEnrolled, client.CodeMFANotBegun,
		} {
			known[c] = true
		}
		codes := regexp.MustCompile("(?m)^\\| *\\d{3} *\\| *`([a-z_]+)`").FindAllStringSubmatch(string(doc), -1)
		if len(codes) < 5 {
			t.Fatalf("docs/errors.md lists %d codes in its table", len(codes))
		}
		for _, m := range codes {
			if !known[m[1]] {
				t.Errorf("the Go client has no constant for %s", m[1])
			}
		}
	})

	t.Run("the client's codes are the services' codes", func(t *testing.T) {
		// The client writes them out, so that it requires no module of
		// this repository; the services answer with pkg/problem's.
		for mine, theirs := range map[string]string{
			client.CodeMalformedJSON: problem.CodeMalformedJSON, client.CodeValidationFailed: problem.CodeValidationFailed,
			client.CodeInvalidCredentials: problem.CodeInvalidCredentials, client.CodeInvalidToken: problem.CodeInvalidToken,
			client.CodeNotFound: problem.CodeNotFound, client.CodeMethodNotAllowed: problem.CodeMethodNotAllowed,
			client.CodeBodyTooLarge: problem.CodeBodyTooLarge, client.CodeUnsupportedMediaType: problem.CodeUnsupportedMediaType,
			client.CodeTooManyRequests: problem.CodeTooManyRequests, client.CodeUnavailable: problem.CodeUnavailable,
			client.CodeInternal: problem.CodeInternal, client.CodeConflict: problem.CodeConflict,
			client.CodeOverloaded: problem.CodeOverloaded, client.CodeMalformedRequest: problem.CodeMalformedRequest,
			client.CodeUnsupportedTransferEncoding: problem.CodeUnsupportedEncoding,
			client.CodeHeadersTooLarge:             problem.CodeHeadersTooLarge, client.CodeRequestTimeout: problem.CodeRequestTimeout,
		} {
			if mine != theirs {
				t.Errorf("the client's code %q is %q in pkg/problem", mine, theirs)
			}
		}
	})

	t.Run("answers nested 10,000 levels deep", func(t *testing.T) {
		// The services no longer store such values; a local server serves
		// what one stored earlier would. The login is the real one.
		deep := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if strings.HasSuffix(r.URL.Path, "/messages") {
				io.WriteString(w, `[{"id":"msg_1","metadata":`+deep+`}]`)
				return
			}
			io.WriteString(w, `{"id":"cnv_1","metadata":`+deep+`}`)
		}))
		defer srv.Close()
		cfg := config(nil)
		cfg.ConversationsURL = srv.URL
		c := newClient(t, cfg)
		for _, call := range []func() error{
			func() error { _, err := c.ListMessagesPage(ctx, "cnv_1", client.MessageListOptions{}, ""); return err },
			func() error { _, err := c.GetConversation(ctx, "cnv_1"); return err },
		} {
			if err := call(); err == nil || !strings.Contains(err.Error(), "decode response") {
				t.Fatalf("err = %v, want the client's decode error", err)
			}
		}
	})
}

// fault is what faults does with one request: pass it on, refuse it as a
// closed port would, lose the service's answer after it was processed, or
// answer "503 <Retry-After>" in the service's stead.
type fault string

const (
	pass       fault = ""
	refuse     fault = "refuse"
	loseAnswer fault = "lose the answer"
)

// faults is an http.RoundTripper in front of the real services that
// injects the fault fail picks for the nth request ("METHOD /path"
// counted from 1) and records every request.
type faults struct {
	fail func(n int, r *http.Request) fault

	mu   sync.Mutex
	seen []string
	key  []string
}

func (f *faults) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	what := r.Method + " " + r.URL.Path
	f.seen = append(f.seen, what)
	f.key = append(f.key, r.Header.Get("Idempotency-Key"))
	n := f.countLocked(what)
	f.mu.Unlock()
	switch ft := f.fail(n, r); {
	case ft == refuse:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	case ft == loseAnswer:
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil {
			resp.Body.Close()
		}
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	case strings.HasPrefix(string(ft), "503 "):
		body, _ := json.Marshal(map[string]any{"code": "service_unavailable", "status": 503, "title": "Service Unavailable"})
		return &http.Response{
			StatusCode: http.StatusServiceUnavailable, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r,
			Header: http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {strings.TrimPrefix(string(ft), "503 ")}},
			Body:   io.NopCloser(strings.NewReader(string(body))), ContentLength: int64(len(body)),
		}, nil
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (f *faults) countLocked(what string) int {
	n := 0
	for _, s := range f.seen {
		if s == what {
			n++
		}
	}
	return n
}

func (f *faults) count(what string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.countLocked(what)
}

func (f *faults) keys(what string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for i, s := range f.seen {
		if s == what {
			out = append(out, f.key[i])
		}
	}
	return out
}
