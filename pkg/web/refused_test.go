package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/web"
)

// servedOverTCP is a web.Serve server on a real listener: what net/http
// itself does with the bytes on the wire is part of what is tested.
type servedOverTCP struct {
	addr string
	logs *syncBuffer
	reg  *prometheus.Registry
}

// serveOverTCP serves an app with one JSON route (POST /things) through
// web.Serve, observed as the services observe their API listener, with the
// given read and write timeouts (0: the default).
func serveOverTCP(t *testing.T, ioTimeout time.Duration) servedOverTCP {
	t.Helper()
	s := servedOverTCP{logs: &syncBuffer{}, reg: prometheus.NewRegistry()}
	cfg := web.Config{Logger: slogJSON(s.logs), Metrics: s.reg}
	e := web.New(cfg)
	e.POST("/things", func(c *echo.Context) error {
		var in loginInput
		if err := web.DecodeJSON(c, 1024, &in); err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, in)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- web.Serve(ctx, slogJSON(io.Discard), 5*time.Second, web.Server{
			Name: "api", Listener: l, Handler: e, Observe: &cfg,
			ReadTimeout: ioTimeout, WriteTimeout: ioTimeout,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s
}

// rawExchange sends raw on a new connection and returns the response the
// client got, or nil when the connection ended without one. It returns once
// the server has closed the connection, which it does after the request's
// access log line is written (raw must ask for the close when the server
// would keep the connection).
func (s servedOverTCP) rawExchange(t *testing.T, raw string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Logf("no response: %v", err)
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("response body: %v", err)
	}
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	_, _ = io.Copy(io.Discard, br) // until the server closes
	return resp
}

// agreement checks that the client's response, the one access log line
// with its request id and the one metric sample say the same status.
func (s servedOverTCP) agreement(t *testing.T, resp *http.Response, wantStatus int, wantCode, wantRoute, wantMethod string) {
	t.Helper()
	if resp == nil {
		t.Fatalf("the client got no response; want %d", wantStatus)
	}
	if resp.StatusCode != wantStatus {
		t.Errorf("client got %d, want %d", resp.StatusCode, wantStatus)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, problem.ContentType) {
		t.Errorf("Content-Type %q, want problem+json", ct)
	}
	var body problemBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("problem body: %v", err)
	}
	if body.Status != wantStatus || body.Code != wantCode {
		t.Errorf("body says %d %q, want %d %q", body.Status, body.Code, wantStatus, wantCode)
	}
	id := resp.Header.Get(web.HeaderRequestID)
	if id == "" {
		t.Fatal("no X-Request-ID")
	}
	var lines []map[string]any
	for _, l := range s.logs.lines(t) {
		if l["request_id"] == id {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d access log lines with request id %s, want 1; log:\n%s", len(lines), id, s.logs.buf.String())
	}
	if got := lines[0]["status"]; got != float64(wantStatus) || lines[0]["route"] != wantRoute || lines[0]["msg"] != "http request" {
		t.Errorf("access log line %v, want status %d route %s", lines[0], wantStatus, wantRoute)
	}
	key := wantRoute + " " + wantMethod + " " + strconv.Itoa(wantStatus)
	if got := series(t, s.reg); got[key] != 1 || len(got) != 1 {
		t.Errorf("metric series %v, want one sample of %q", got, key)
	}
}

// TestRequestsNetHTTPRefusesAreAnsweredLoggedAndCounted: what Go's HTTP
// server refuses before any handler runs reaches the client as
// problem+json with a request id, and leaves one access log line and one
// metric sample with the same status.
func TestRequestsNetHTTPRefusesAreAnsweredLoggedAndCounted(t *testing.T) {
	t.Parallel()
	const post = "POST /things HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	for _, tc := range []struct {
		name   string
		raw    string
		status int
		code   string
		method string
	}{
		{"headers over the limit", "GET /things HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n",
			431, problem.CodeHeadersTooLarge, "GET"},
		{"gzip, chunked", post + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
			400, problem.CodeUnsupportedEncoding, "POST"},
		{"HTTP version other than 1.x", "GET /things HTTP/3.0\r\nHost: x\r\n\r\n",
			400, problem.CodeMalformedRequest, "GET"},
		{"duplicate Content-Length", post + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
			400, problem.CodeMalformedRequest, "POST"},
		{"negative Content-Length", post + "Content-Length: -1\r\n\r\n{}",
			400, problem.CodeMalformedRequest, "POST"},
		{"control character in a header", "GET /things HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n",
			400, problem.CodeMalformedRequest, "GET"},
		{"control character in the request line", "GET /th\x01ings HTTP/1.1\r\nHost: x\r\n\r\n",
			400, problem.CodeMalformedRequest, "GET"},
		{"%zz in the path", "GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n",
			400, problem.CodeMalformedRequest, "GET"},
		{"no Host header", "GET /things HTTP/1.1\r\n\r\n",
			400, problem.CodeMalformedRequest, "GET"},
		{"an unknown method token with a control character", "G\x02T /things HTTP/1.1\r\nHost: x\r\n\r\n",
			400, problem.CodeMalformedRequest, "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := serveOverTCP(t, 0)
			s.agreement(t, s.rawExchange(t, tc.raw), tc.status, tc.code, web.RouteRefused, tc.method)
		})
	}
}

// TestRoutedRequestsAreNotTakenForRefusals: on the same observed listener,
// a request net/http accepts is answered and recorded once, by the
// observer of the handler, also on a kept-alive connection.
func TestRoutedRequestsAreNotTakenForRefusals(t *testing.T) {
	t.Parallel()
	s := serveOverTCP(t, 0)
	raw := "POST /things HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 1\r\n\r\n{"
	s.agreement(t, s.rawExchange(t, raw), 400, problem.CodeMalformedJSON, "/things", "POST")
}

// TestBodyCutAtTheReadTimeoutIsRecordedAsWhatTheClientGot: a body that
// does not arrive before the server's read timeout (a slow or stalled
// sender) gets a 408 the client really receives, and the access log line
// and the metric say 408 too, not a 400 the client never got.
func TestBodyCutAtTheReadTimeoutIsRecordedAsWhatTheClientGot(t *testing.T) {
	t.Parallel()
	// The timeout only decides when the server gives up on the body; the
	// test waits for the answer however long that takes.
	s := serveOverTCP(t, 500*time.Millisecond)
	raw := "POST /things HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"user"
	s.agreement(t, s.rawExchange(t, raw), http.StatusRequestTimeout, problem.CodeRequestTimeout, "/things", "POST")
}

// TestTooLargeBodyIsAnsweredToAClientStillSending: a client that writes
// its whole body before it reads (as curl does with a file) gets the 413.
// The server answers at the limit, long before the body's end; closing the
// connection with the rest unread made the kernel reset it, and the
// client's write failed without the answer, while the log and the metric
// said 413.
func TestTooLargeBodyIsAnsweredToAClientStillSending(t *testing.T) {
	s := serveOverTCP(t, 0)
	body := strings.Repeat("x", 4<<20)
	resp := s.rawExchange(t, "POST /things HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	s.agreement(t, resp, http.StatusRequestEntityTooLarge, problem.CodeBodyTooLarge, "/things", "POST")
}
