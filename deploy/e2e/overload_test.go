package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/web"
)

// burstRequests is how many requests the burst sends at once: a busy
// pool must not look like an outage.
const burstRequests = 2000

// unanswer is the outcome of a request whose connection closed without an
// answer; the access log tells whether that was the machine's slowness
// (see TestBurstIsOverloadNotOutage).
const unanswer = "no answer"

// TestBurstIsOverloadNotOutage sends 2,000 simultaneous GET
// /v1/conversations to one conversations process whose MongoDB pool (2
// connections) and in-flight bound (4 requests) are small, so that most of
// the burst is beyond its capacity. Readiness stays 200 throughout, no
// response says the database is unreachable, every response is a 200 or
// the overloaded 503 with Retry-After, and the metrics count exactly what
// the clients got.
func TestBurstIsOverloadNotOutage(t *testing.T) {
	t.Parallel()
	const maxInFlight = 4
	s := newStack(t)
	s.startAccount(t)
	u, err := url.Parse(mongotest.URI(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("maxPoolSize", "2")
	u.RawQuery = q.Encode()
	env := append(append([]string{}, s.convEnv...),
		"CONVERSATIONS_MONGODB_URI="+u.String(), fmt.Sprintf("CONVERSATIONS_MAX_IN_FLIGHT=%d", maxInFlight))
	conv := start(t, filepath.Join(s.bin, "conversations"), env, s.convOps)
	bearer := s.login(t, "alice").IDToken
	if status, _, body := call(t, "POST", s.convURL+"/v1/conversations", bearer, `{"subject":"burst"}`); status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	convAddr := strings.TrimPrefix(s.convURL, "http://")

	before := scrapeRequestCounts(t, "http://"+s.convOps+"/metrics")

	// The burst, with /readyz asked again and again while it runs.
	var readyChecks, notReady atomic.Int64
	burstDone := make(chan struct{})
	readinessDone := make(chan struct{})
	go func() {
		defer close(readinessDone)
		for {
			status, body := get(t, "http://"+s.convOps+"/readyz")
			readyChecks.Add(1)
			if status != http.StatusOK {
				notReady.Add(1)
				t.Errorf("/readyz during the burst: %d %s", status, body)
			}
			select {
			case <-burstDone:
				return
			default:
			}
		}
	}()
	// Each request on a connection of its own, written by the goroutine
	// that dialled it: with an http.Transport, the write happens in another
	// goroutine that a loaded machine may start late, and net/http's
	// header timeout would then close the connection before any answer.
	rawGet := func(id string) string {
		return "GET /v1/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + bearer +
			"\r\nX-Request-ID: " + id + "\r\nConnection: close\r\n\r\n"
	}
	var mu sync.Mutex
	outcomes := map[string]int{}
	// Requests that got no answer, by request id: whether they were sent
	// ReadHeaderTimeout or more after their dial began.
	unanswered := map[string]bool{}
	begin := make(chan struct{})
	var wg sync.WaitGroup
	for i := range burstRequests {
		wg.Go(func() {
			<-begin
			id := fmt.Sprintf("burst-%04d", i)
			outcome := func() string {
				dialling := time.Now()
				c, err := net.Dial("tcp", convAddr)
				if err != nil {
					return "transport error: " + err.Error()
				}
				defer c.Close()
				if _, err := io.WriteString(c, rawGet(id)); err != nil {
					return "transport error: " + err.Error()
				}
				sent := time.Since(dialling)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					mu.Lock()
					unanswered[id] = sent >= web.ReadHeaderTimeout
					mu.Unlock()
					return unanswer
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				outcome := fmt.Sprintf("%d %s", resp.StatusCode, problemCode(body))
				if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
					outcome += " without Retry-After"
				}
				return outcome
			}()
			mu.Lock()
			outcomes[outcome]++
			mu.Unlock()
		})
	}
	close(begin)
	wg.Wait()
	close(burstDone)
	<-readinessDone
	t.Logf("burst of %d: %v; /readyz asked %d times", burstRequests, outcomes, readyChecks.Load())

	ok, overloaded := outcomes["200 "], outcomes["503 "+problem.CodeOverloaded]
	if ok+overloaded+outcomes[unanswer] != burstRequests {
		t.Errorf("outcomes %v: every response must be a 200 or the overloaded 503 with Retry-After", outcomes)
	}
	if ok == 0 {
		t.Errorf("outcomes %v: no request of the burst was served", outcomes)
	}
	// Shedding itself is proven request by request in pkg/web
	// (TestLimitInFlightShedsTheExcessAtOnce); how much of a burst is shed
	// depends on the machine's speed, so it is logged, not asserted.

	// The metrics count what the clients got: every 200 on the route, every
	// overloaded 503 either shed before routing or on the route (a request
	// that waited too long for a pooled connection).
	after := scrapeRequestCounts(t, "http://"+s.convOps+"/metrics")
	delta := func(key string) int { return after[key] - before[key] }
	if got := delta("/v1/conversations GET 200"); got != ok {
		t.Errorf("metric counts %d 200s of the burst, the clients got %d", got, ok)
	}
	if got := delta("shed GET 503") + delta("/v1/conversations GET 503"); got != overloaded {
		t.Errorf("metric counts %d overloaded 503s of the burst, the clients got %d (%v)", got, overloaded, after)
	}

	// A request net/http refuses before routing reaches the API's log and
	// metrics too (the listener of the real binary is observed).
	c, err := net.Dial("tcp", convAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /v1/%zz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || problemCode(body) != problem.CodeMalformedRequest || resp.Header.Get("X-Request-ID") == "" {
		t.Errorf("%%zz in the path: %d %s (X-Request-ID %q), want 400 malformed_request with a request id", resp.StatusCode, body, resp.Header.Get("X-Request-ID"))
	}
	if got := scrapeRequestCounts(t, "http://"+s.convOps+"/metrics")["refused GET 400"]; got != 1 {
		t.Errorf("metric counts %d refused 400s, want 1", got)
	}
	conv.stop(t)
	logged := accessLines(t, conv.Logs.String())
	if line := logged[resp.Header.Get("X-Request-ID")]; line["status"] != float64(400) {
		t.Errorf("access log line of the refused request: %v", line)
	}
	// A request without an answer is the machine's slowness, and nothing
	// else, when the log agrees with the client: either the server never
	// read it (no line: the request was sent only after the server's
	// header timeout could have closed the connection), or the server
	// could not write the answer in its write timeout and logged that no
	// response was sent (status 0). Pinned to one core under the whole
	// suite, a handful of the 2,000 did one or the other.
	for id, sentLate := range unanswered {
		line, found := logged[id]
		switch {
		case !found && sentLate:
		case found && line["status"] == float64(web.StatusNoResponse):
		default:
			t.Errorf("request %s got no answer; sent %v after its dial began (header timeout %v); access log: %v",
				id, map[bool]string{true: "late", false: "in time"}[sentLate], web.ReadHeaderTimeout, line)
		}
	}
	if n := strings.Count(conv.Logs.String(), "database is unreachable"); n > 0 {
		t.Errorf("%d log lines say the database is unreachable", n)
	}
}

// problemCode is the code of a problem+json body, or "".
func problemCode(body []byte) string {
	var p struct{ Code string }
	_ = json.Unmarshal(body, &p)
	return p.Code
}
