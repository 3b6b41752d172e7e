package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/deploy/internal/svcproc"
)

// exchange is one request sent to a real binary and what it must leave
// behind: the status the client gets, the level of its access log line
// and the route label of its metric.
type exchange struct {
	name                string
	service             string // "account", "conversations" or "starting"
	method, path, ctype string
	body, bearer        string
	status              int
	route, level        string
	requestID           string // set when sent
	gotStatus           int
	gotRetryAfter       string
}

// TestClientLogAndMetricsAgree sends every kind of failure to the real
// binaries and checks that the status the client got, the status and level
// of the access log line with the same request id, and the status label of
// the metric series it was counted in are one and the same. The cases are
// the ones operators met: a 301-character subject (a 400 the access log
// called a 500 at level ERROR), and the 503s of a service still starting.
func TestClientLogAndMetricsAgree(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	account := s.startAccount(t)
	conv := s.startConversations(t)
	bearer := s.login(t, "alice").IDToken

	// An account service whose database is unreachable stays in start-up:
	// every API request gets the start-up 503.
	startingOps := svcproc.FreeAddrForTest(t)
	startingAddr := svcproc.FreeAddrForTest(t)
	starting, err := svcproc.Launch(filepath.Join(s.bin, "account"), []string{
		"ACCOUNT_MONGODB_URI=mongodb://" + svcproc.FreeAddrForTest(t) + "/?connectTimeoutMS=200",
		"ACCOUNT_MONGODB_TIMEOUT=300ms",
		"ACCOUNT_HTTP_ADDR=" + startingAddr, "ACCOUNT_OPS_ADDR=" + startingOps,
		"ACCOUNT_ISSUER=http://" + startingAddr,
	}, startingOps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(starting.Kill)
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + startingOps + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the starting account service to listen")

	base := map[string]string{"account": s.accountURL, "conversations": s.convURL, "starting": "http://" + startingAddr}
	wrong := `{"username":"bob","password":"wrong","accountName":"acme"}`
	exchanges := []*exchange{
		{name: "400 subject of 301 characters", service: "conversations", method: "POST", path: "/v1/conversations", ctype: "application/json",
			body: `{"subject":"` + strings.Repeat("x", 301) + `"}`, bearer: bearer, status: 400, route: "/v1/conversations", level: "INFO"},
		{name: "400 malformed JSON", service: "conversations", method: "POST", path: "/v1/conversations", ctype: "application/json",
			body: `{"subject":`, bearer: bearer, status: 400, route: "/v1/conversations", level: "INFO"},
		{name: "401 no bearer", service: "conversations", method: "GET", path: "/v1/conversations", status: 401, route: "/v1/conversations", level: "INFO"},
		{name: "401 bad bearer", service: "account", method: "GET", path: "/definitions", bearer: "not-a-token", status: 401, route: "/definitions", level: "INFO"},
		{name: "404 route", service: "conversations", method: "GET", path: "/v2/nothing", bearer: bearer, status: 404, route: "unmatched", level: "INFO"},
		{name: "405 method", service: "conversations", method: "DELETE", path: "/v1/conversations", bearer: bearer, status: 405, route: "/v1/conversations", level: "INFO"},
		{name: "413 body too large", service: "conversations", method: "POST", path: "/v1/conversations", ctype: "application/json",
			body: `{"subject":"` + strings.Repeat("x", 1<<20) + `"}`, bearer: bearer, status: 413, route: "/v1/conversations", level: "INFO"},
		{name: "415 not JSON", service: "conversations", method: "POST", path: "/v1/conversations", ctype: "text/plain",
			body: "subject=hello", bearer: bearer, status: 415, route: "/v1/conversations", level: "INFO"},
	}
	// Five wrong passwords for bob, then a sixth attempt is throttled.
	for i := range 5 {
		exchanges = append(exchanges, &exchange{name: fmt.Sprintf("401 wrong password %d", i+1), service: "account", method: "POST", path: "/login",
			ctype: "application/json", body: wrong, status: 401, route: "/login", level: "INFO"})
	}
	exchanges = append(exchanges,
		&exchange{name: "429 throttled login", service: "account", method: "POST", path: "/login", ctype: "application/json",
			body: wrong, status: 429, route: "/login", level: "INFO"},
		&exchange{name: "503 starting", service: "starting", method: "GET", path: "/definitions", bearer: bearer,
			status: 503, route: "starting", level: "WARN"},
	)

	for i, x := range exchanges {
		x.requestID = fmt.Sprintf("agree-%02d", i)
		req, _ := http.NewRequest(x.method, base[x.service]+x.path, strings.NewReader(x.body))
		if x.ctype != "" {
			req.Header.Set("Content-Type", x.ctype)
		}
		if x.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+x.bearer)
		}
		req.Header.Set("X-Request-ID", x.requestID)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", x.name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		x.gotStatus, x.gotRetryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	}

	// The metrics, then the logs (readable once the processes ended).
	series := map[string]map[string]int{}
	for name, ops := range map[string]string{"account": s.accountOps, "conversations": s.convOps, "starting": startingOps} {
		series[name] = scrapeRequestCounts(t, "http://"+ops+"/metrics")
	}
	// Both services count the database commands they send (the logins
	// read users, the listing and the creations read conversations).
	for name, ops := range map[string]string{"account": s.accountOps, "conversations": s.convOps} {
		if n := scrapeCounter(t, "http://"+ops+"/metrics", `mongodb_commands_total{command="find"}`); n <= 0 {
			t.Errorf("%s: mongodb_commands_total{command=\"find\"} = %v, want > 0", name, n)
		}
	}
	account.stop(t)
	conv.stop(t)
	if err := starting.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	lines := map[string]map[string]any{}
	for _, p := range []*svcproc.Process{account.Process, conv.Process, starting} {
		for id, line := range accessLines(t, p.Logs.String()) {
			lines[id] = line
		}
	}

	want := map[string]map[string]int{} // service → series → requests sent
	for _, x := range exchanges {
		if x.gotStatus != x.status {
			t.Errorf("%s: client got %d, want %d", x.name, x.gotStatus, x.status)
		}
		if (x.status == 429 || x.status == 503) && x.gotRetryAfter == "" {
			t.Errorf("%s: no Retry-After", x.name)
		}
		line, ok := lines[x.requestID]
		switch {
		case !ok:
			t.Errorf("%s: no access log line with request id %s", x.name, x.requestID)
		case line["status"] != float64(x.gotStatus) || line["level"] != x.level || line["route"] != x.route:
			t.Errorf("%s: client got %d; log line says status %v, level %v, route %v (want %d, %s, %s)",
				x.name, x.gotStatus, line["status"], line["level"], line["route"], x.gotStatus, x.level, x.route)
		}
		key := x.route + " " + x.method + " " + strconv.Itoa(x.gotStatus)
		if want[x.service] == nil {
			want[x.service] = map[string]int{}
		}
		want[x.service][key]++
	}
	for service, keys := range want {
		for key, n := range keys {
			if got := series[service][key]; got != n {
				t.Errorf("%s: metric series {%s} counted %d requests, want %d (all series: %v)", service, key, got, n, series[service])
			}
		}
	}
	// Nothing a client caused is an error anywhere.
	for service, keys := range series {
		for key := range keys {
			if strings.HasSuffix(key, " 500") {
				t.Errorf("%s: a 500 was counted: %s", service, key)
			}
		}
	}
}

// requestCount matches the count of one http_request_duration_seconds
// series in the Prometheus text format.
var requestCount = regexp.MustCompile(`^http_request_duration_seconds_count\{(.*)\} (\d+)$`)

var labelPair = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// scrapeRequestCounts returns the request counts of the HTTP metric by
// "route method status".
func scrapeRequestCounts(t *testing.T, url string) map[string]int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := requestCount.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, pair := range labelPair.FindAllStringSubmatch(m[1], -1) {
			labels[pair[1]] = pair[2]
		}
		n, _ := strconv.Atoi(m[2])
		out[labels["route"]+" "+labels["method"]+" "+labels["status"]] = n
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// scrapeCounter returns the value of one series (name and labels as the
// text format writes them), or -1 when the scrape has none.
func scrapeCounter(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if value, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			n, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return n
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return -1
}

// accessLines returns the access log lines of a service's output by
// request id.
func accessLines(t *testing.T, logs string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, raw := range strings.Split(logs, "\n") {
		var line map[string]any
		if json.Unmarshal([]byte(raw), &line) != nil || line["msg"] != "http request" {
			continue
		}
		if id, _ := line["request_id"].(string); id != "" {
			out[id] = line
		}
	}
	return out
}
