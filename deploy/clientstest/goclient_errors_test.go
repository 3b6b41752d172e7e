package clientstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/pkg/problem"
)

// answer makes the wire answer GET /definitions with respond: a stand-in
// for the answers of a broken service or gateway, which the real services
// never give.
func (f *wire) answer(respond func(w http.ResponseWriter, r *http.Request)) {
	f.set(func(f *wire) {
		f.hook = func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != "/definitions" {
				return false
			}
			respond(w, r)
			return true
		}
	})
}

func (g *goSuite) testProblemParsing(t *testing.T) {
	clk := newClock()
	// One user and one session for every case: only GET /definitions is
	// answered by the stand-in.
	f := g.newWire(t)
	// Retries off: this is about reading one answer.
	c := f.newClient(t, clk, client.Config{
		Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password},
		MaxRetries:  -1,
	})
	if err := c.Login(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		respond func(w http.ResponseWriter, r *http.Request)
		want    client.Error
		is      error
		message string
	}{
		{
			name: "validation_failed with fields",
			respond: func(w http.ResponseWriter, r *http.Request) {
				p := problem.Validation(
					problem.FieldError{Field: "limit", Reason: "must be an integer from 1 to 100"},
					problem.FieldError{Field: "participants[2]", Reason: "must be a user id of 1 to 128 bytes"})
				p.Instance = "/v1/requests/r-1"
				_ = problem.Write(w, p)
			},
			want: client.Error{Status: 400, Code: "validation_failed", Type: "urn:problem-type:validation_failed",
				Title: "Bad Request", Detail: "The request has invalid or missing fields.", Instance: "/v1/requests/r-1",
				FieldErrors: []client.FieldError{
					{Field: "limit", Reason: "must be an integer from 1 to 100"},
					{Field: "participants[2]", Reason: "must be a user id of 1 to 128 bytes"}}},
			is:      client.ErrValidationFailed,
			message: "client: GET /definitions: 400 validation_failed: The request has invalid or missing fields. (limit: must be an integer from 1 to 100; participants[2]: must be a user id of 1 to 128 bytes) [request id " + standInRequestID + "]",
		},
		{
			name:    "503 with Retry-After in seconds",
			respond: func(w http.ResponseWriter, r *http.Request) { _ = problem.Write(w, problem.DatabaseUnavailable()) },
			want: client.Error{Status: 503, Code: "service_unavailable", Type: "urn:problem-type:service_unavailable",
				Title: "Service Unavailable", Detail: "The database is unreachable; retry later.", RetryAfter: problem.RetryAfterDatabase},
			is:      client.ErrUnavailable,
			message: "client: GET /definitions: 503 service_unavailable: The database is unreachable; retry later. [retry after 5s] [request id " + standInRequestID + "]",
		},
		{
			name: "429 with Retry-After as an HTTP date",
			respond: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", clk.Now().Add(90*time.Second).Format(http.TimeFormat))
				_ = problem.Write(w, problem.TooManyRequests("Too many requests; retry later.", 0))
			},
			want: client.Error{Status: 429, Code: "too_many_requests", Type: "urn:problem-type:too_many_requests",
				Title: "Too Many Requests", Detail: "Too many requests; retry later.", RetryAfter: 90 * time.Second},
			is: client.ErrTooManyRequests,
		},
		{
			name: "a code this client does not know",
			respond: func(w http.ResponseWriter, r *http.Request) {
				_ = problem.Write(w, problem.New(http.StatusConflict, "conflict", ""))
			},
			want:    client.Error{Status: 409, Code: "conflict", Type: "urn:problem-type:conflict", Title: "Conflict"},
			message: "client: GET /definitions: 409 conflict [request id " + standInRequestID + "]",
		},
		{
			name: "a body that is no JSON",
			respond: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				w.WriteHeader(http.StatusBadGateway)
				io.WriteString(w, "<html>\n<body>\n  <h1>502 Bad Gateway</h1>\n</body>\n</html>\n")
			},
			want:    client.Error{Status: 502, Code: "http_502", Title: "Bad Gateway", Detail: "<html> <body> <h1>502 Bad Gateway</h1> </body> </html>"},
			message: "client: GET /definitions: 502 http_502: <html> <body> <h1>502 Bad Gateway</h1> </body> </html> [request id " + standInRequestID + "]",
		},
		{
			name: "JSON that is no problem",
			respond: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "boom"})
			},
			want: client.Error{Status: 500, Code: "http_500", Title: "Internal Server Error", Detail: `{"error":"boom"}`},
		},
		{
			name: "a problem body under the wrong media type",
			respond: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, "upstream connect error")
			},
			want: client.Error{Status: 503, Code: "http_503", Title: "Service Unavailable", Detail: "upstream connect error"},
		},
		{
			name: "a binary body is not quoted",
			respond: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.WriteHeader(http.StatusInternalServerError)
				w.Write([]byte{0, 1, 2, 0xff})
			},
			want: client.Error{Status: 500, Code: "http_500", Title: "Internal Server Error"},
		},
		{
			name: "no body, nonsense Retry-After",
			respond: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "soon")
				w.WriteHeader(http.StatusServiceUnavailable)
			},
			want:    client.Error{Status: 503, Code: "http_503", Title: "Service Unavailable"},
			message: "client: GET /definitions: 503 http_503 [request id " + standInRequestID + "]",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.count("GET /definitions")
			f.answer(tc.respond)
			_, err := c.ListDefinitions(context.Background())
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), want *client.Error", err, err)
			}
			want := tc.want
			want.Method, want.Path, want.RequestID = "GET", "/definitions", standInRequestID
			if fmt.Sprintf("%#v", *e) != fmt.Sprintf("%#v", want) {
				t.Fatalf("error =\n %#v\nwant\n %#v", *e, want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(err, %v) is false", tc.is)
			}
			if !client.IsCode(err, want.Code) {
				t.Errorf("IsCode(err, %q) is false", want.Code)
			}
			if tc.message != "" && err.Error() != tc.message {
				t.Errorf("Error() =\n %s\nwant\n %s", err, tc.message)
			}
			if n := f.count("GET /definitions") - before; n != 1 {
				t.Errorf("%d requests: only a 401 is retried", n)
			}
		})
	}
}

func (g *goSuite) testErrorsNeverCarrySecrets(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	ctx := context.Background()
	tok, err := c.IDToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(err error) {
		t.Helper()
		if err == nil {
			t.Fatal("no error")
		}
		var e *client.Error
		errors.As(err, &e)
		for _, s := range []string{err.Error(), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e)} {
			if strings.Contains(s, tok) || strings.Contains(s, f.password) {
				t.Fatalf("error carries a secret: %s", s)
			}
		}
		// The texts are the service's, never rewritten (a replaced
		// secret would mangle them and point at the secret).
		if strings.Contains(err.Error(), "[redacted]") {
			t.Fatalf("error %q: rewritten", err)
		}
	}

	// The client keeps secrets out of its errors by never putting them
	// there: an error holds the method, the path and the answer. (An
	// answer that echoed a real token was cut to the detail's length
	// before the secret could be found in it: the test of the replacement
	// of echoed secrets passed only with the stand-ins' short tokens.)
	f.answer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "the password or the token is e wrong")
	})
	_, err = c.ListDefinitions(ctx)
	check(err)
	if !strings.Contains(err.Error(), "the password or the token is e wrong") {
		t.Fatalf("error %q: want the answer's text intact", err)
	}

	f.answer(func(w http.ResponseWriter, r *http.Request) {
		p := problem.Validation(problem.FieldError{Field: "token", Reason: "unexpected"})
		p.Detail = "Token refused."
		_ = problem.Write(w, p)
	})
	_, err = c.ListDefinitions(ctx)
	check(err)

	f.set(func(f *wire) {
		f.hook = func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != "/login" {
				return false
			}
			_ = problem.Write(w, problem.BadRequest(problem.CodeMalformedJSON, "Cannot read the body."))
			return true
		}
	})
	check(c.Login(ctx))

	// Transport failures name the request, not the URL's secrets (it has
	// none) nor the token.
	f.conv.Close()
	_, err = c.GetConversation(ctx, "cnv_1")
	if err == nil || !strings.Contains(err.Error(), "GET /v1/conversations/cnv_1") || strings.Contains(err.Error(), tok) {
		t.Fatalf("transport error = %v", err)
	}
}

func (g *goSuite) testBodySizeCap(t *testing.T) {
	f := g.newWire(t)
	c := f.client(t, nil)
	f.answer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `[{"id":"`+strings.Repeat("x", client.MaxBodyBytes)+`"}]`)
	})
	if _, err := c.ListDefinitions(context.Background()); !errors.Is(err, client.ErrBodyTooLarge) {
		t.Fatalf("err = %v, want ErrBodyTooLarge", err)
	}

	// An oversized error body still gives an *Error.
	f.answer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, strings.Repeat("y", client.MaxBodyBytes+10))
	})
	_, err := c.ListDefinitions(context.Background())
	var e *client.Error
	if !errors.As(err, &e) || e.Code != "http_502" || len(e.Detail) > 300 {
		t.Fatalf("err = %.300v", err)
	}
}

// testPassword is the password of the tests that send no request.
const testPassword = "pw-alice-S3cret!"

func (g *goSuite) testCredentialsArePrintedWithoutThePassword(t *testing.T) {
	cfg := client.Config{AccountURL: "http://a", Credentials: client.Credentials{AccountName: "acme", Username: "alice", Password: testPassword}}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "credentials", cfg.Credentials)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "config", cfg)
	out := fmt.Sprintf("%v %+v %#v %s %v", cfg, cfg, cfg, cfg.Credentials, &cfg.Credentials) + logs.String()
	if strings.Contains(out, testPassword) {
		t.Fatalf("password printed: %s", out)
	}
	if !strings.Contains(out, "alice") {
		t.Fatalf("username missing: %s", out)
	}
}

func (g *goSuite) testNewChecksTheConfig(t *testing.T) {
	creds := client.Credentials{AccountName: "acme", Username: "alice", Password: testPassword}
	for _, cfg := range []client.Config{
		{Credentials: creds},
		{AccountURL: "localhost:8080", Credentials: creds},
		{AccountURL: "/login", Credentials: creds},
		{AccountURL: "http://u:p@localhost:8080", Credentials: creds},
		{AccountURL: "http://localhost:8080?x=1", Credentials: creds},
		{AccountURL: "http://localhost:8080", ConversationsURL: "ftp://localhost", Credentials: creds},
		{AccountURL: "u:p@localhost:8080", Credentials: creds},
		{AccountURL: "http://localhost:8080", Credentials: client.Credentials{AccountName: "acme", Username: "alice"}},
		{AccountURL: "http://localhost:8080", Credentials: client.Credentials{AccountName: "acme", Password: "pw"}},
		{AccountURL: "http://localhost:8080", Credentials: client.Credentials{Username: "alice", Password: "pw"}},
	} {
		if _, err := client.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		} else if strings.Contains(err.Error(), testPassword) || strings.Contains(err.Error(), "u:p@") {
			t.Errorf("New error %q names a password", err)
		}
	}

	// Without ConversationsURL, the account methods work and the
	// conversation methods say what is missing.
	f := g.newWire(t)
	c, err := client.New(client.Config{AccountURL: f.account.URL + "/", Credentials: client.Credentials{
		AccountName: f.accountName, Username: f.username, Password: f.password}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListDefinitions(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = c.ListConversationsPage(context.Background(), client.ListOptions{}, "")
	if err == nil || !strings.Contains(err.Error(), "ConversationsURL") {
		t.Fatalf("err = %v", err)
	}
	for _, err := range c.Conversations(context.Background(), client.ListOptions{}) {
		if err == nil || !strings.Contains(err.Error(), "ConversationsURL") {
			t.Fatalf("iterator: err = %v", err)
		}
	}
}
