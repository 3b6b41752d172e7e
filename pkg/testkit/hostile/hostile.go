// Package hostile sends what an attacker or a careless client would to
// every documented operation of a service: malformed and huge
// bodies, deep nesting, invalid UTF-8, wrong types, odd dates, altered
// cursors, duplicate and oversized headers, forged tokens and OAuth
// parameter games; the cases are generated from the service's OpenAPI
// document. Run checks every answer: no 5xx, every error problem+json
// (RFC 6749 JSON on /oauth2/*), nothing internal in any body (driver
// messages, file paths, Go type names), and the client, the access log and
// the metrics agreeing on every status.
package hostile

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/testkit/openapitest"
)

// Target is a running service: an httptest.Server with the service's
// handler, its access log and its metrics.
type Target struct {
	Doc    *openapitest.Validator
	URL    string // base URL, e.g. httptest.Server.URL
	Client *http.Client
	// Bearer is a valid token for the secured operations, so that a
	// hostile parameter or body gets past authentication to the layers
	// behind it.
	Bearer string
	// PathValues are values of path parameters (by name) that exist, so
	// that hostile bodies reach the store; any other parameter is "x".
	PathValues map[string]string
	// Log returns the access log written so far: JSON lines, each with
	// request_id and status.
	Log func() []byte
	// Metrics is the registry the service's HTTP metrics are in
	// (http_request_duration_seconds, labelled by status).
	Metrics prometheus.Gatherer
}

// Case is one hostile request.
type Case struct {
	Name   string // "FAMILY METHOD PATH: what"
	Family string
	Op     openapitest.Operation
	build  func(tg Target) (*http.Request, error)
}

// The families of hostile requests.
const (
	Malformed   = "malformed body"
	Huge        = "huge body"
	Nesting     = "deep nesting"
	UTF8        = "invalid UTF-8"
	WrongType   = "wrong type"
	OddDate     = "odd date"
	Cursor      = "altered cursor"
	Headers     = "headers"
	ForgedToken = "forged token"
	OAuth       = "OAuth parameters"
)

// deepNesting is the depth of the nested arrays sent: far beyond any sane
// document: 10,000 levels.
const deepNesting = 10000

// hugeBody is larger than every body limit of the services (the largest
// is 128 KiB, definitions): 2 MiB.
const hugeBody = 2 << 20

// oddDates are times that parse as RFC 3339 (or nearly), at the edges of
// what a time can be.
var oddDates = []string{
	"0000-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00Z",
	"2024-02-30T00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T00:00:60Z",
	"2024-01-01", "1e309", "-1", "2024-01-01T00:00:00.0000000000000000001Z",
	"+275760-09-13T00:00:00Z", "2024-01-01T00:00:00+99:99",
}

// wrongTypes replace a body field's value.
var wrongTypes = []string{`{"$ne":null}`, `[1,"a"]`, `12`, `-1.5e308`, `true`, `null`, `"x"`, `{}`, `[]`, `"` + strings.Repeat("a", 1000) + `"`}

// forgedTokens are bearer tokens that no service issued, and header values
// that are not bearer tokens.
var forgedTokens = map[string]string{
	"alg none":            "Bearer " + b64(`{"alg":"none","typ":"JWT"}`) + "." + b64(`{"sub":"u","account_id":"a","exp":4102444800}`) + ".",
	"HS256 with a guess":  "Bearer " + b64(`{"alg":"HS256","typ":"JWT"}`) + "." + b64(`{"sub":"u","account_id":"a","exp":4102444800}`) + ".c2lnbmF0dXJl",
	"garbage":             "Bearer not-a-token",
	"three empty parts":   "Bearer ..",
	"invalid base64":      "Bearer %%%.%%%.%%%",
	"huge":                "Bearer " + strings.Repeat("A", 32<<10),
	"invalid UTF-8":       "Bearer \xff\xfe.\xff.\xff",
	"empty bearer":        "Bearer ",
	"scheme only":         "Bearer",
	"basic instead":       "Basic dXNlcjpwYXNz",
	"unknown scheme":      "Token abc",
	"JSON header":         "Bearer " + b64(`{"alg":"RS256","kid":"../../etc/passwd"}`) + "." + b64(`{}`) + ".AAAA",
	"jku header":          "Bearer " + b64(`{"alg":"RS256","jku":"http://127.0.0.1:1/jwks"}`) + "." + b64(`{"sub":"u"}`) + ".AAAA",
	"nested JSON payload": "Bearer " + b64(`{"alg":"RS256"}`) + "." + b64(strings.Repeat("[", 5000)) + ".AAAA",
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// everyRouteTokens are the forged tokens sent to every secured operation;
// the others go to the first one only. Every route authenticates through
// the same verifier, so the whole set on one route proves the verifier and
// these prove that each route is behind it (none, forged, tampered with).
var everyRouteTokens = map[string]bool{"alg none": true, "garbage": true, "scheme only": true}

// Cases generates the hostile requests for every operation of tg.Doc.
func Cases(tg Target) []Case {
	var out []Case
	firstSecured := true
	for _, op := range tg.Doc.Operations() {
		add := func(family, what string, build func(tg Target) (*http.Request, error)) {
			out = append(out, Case{Name: fmt.Sprintf("%s %s %s: %s", family, op.Method, op.Path, what), Family: family, Op: op, build: build})
		}
		body := func(b, contentType string) func(Target) (*http.Request, error) {
			return func(tg Target) (*http.Request, error) { return newRequest(tg, op, nil, nil, b, contentType) }
		}
		if op.BodyType == "application/json" {
			for what, b := range map[string]string{
				"truncated":        `{"a":`,
				"two documents":    `{}{}`,
				"not JSON":         "\x00\xff garbage",
				"empty":            ``,
				"trailing garbage": `{} x`,
				"duplicate keys":   duplicateKeys(op),
				"a string":         `"x"`,
				"an array":         `[]`,
			} {
				add(Malformed, what, body(b, op.BodyType))
			}
			add(Huge, "2 MiB", body(`{"x":"`+strings.Repeat("a", hugeBody)+`"}`, op.BodyType))
			add(Nesting, "whole body", body(`{"x":`+strings.Repeat("[", deepNesting)+strings.Repeat("]", deepNesting)+`}`, op.BodyType))
			add(Nesting, "unclosed", body(`{"x":`+strings.Repeat("[", deepNesting), op.BodyType))
			add(Malformed, "wrong content type", body(`{}`, "text/plain"))
			for _, f := range op.Body {
				add(Nesting, "field "+f.Name, body(`{"`+f.Name+`":`+strings.Repeat(`{"a":`, deepNesting)+`1`+strings.Repeat("}", deepNesting)+`}`, op.BodyType))
				add(UTF8, "field "+f.Name, body(`{"`+f.Name+"\":\"\xff\xfe\xed\xa0\x80\"}", op.BodyType))
				add(UTF8, "escaped lone surrogate in field "+f.Name, body(`{"`+f.Name+`":"\ud800"}`, op.BodyType))
				for _, v := range wrongTypes {
					add(WrongType, fmt.Sprintf("field %s = %.20s", f.Name, v), body(`{"`+f.Name+`":`+v+`}`, op.BodyType))
				}
				if f.Format == "date-time" {
					for _, d := range oddDates {
						add(OddDate, "field "+f.Name+" = "+d, body(`{"`+f.Name+`":"`+d+`"}`, op.BodyType))
					}
				}
			}
		}
		if op.BodyType == "application/x-www-form-urlencoded" {
			for what, b := range map[string]string{
				"bad escape":        "grant_type=%zz",
				"invalid UTF-8":     "grant_type=%FF%FE&client_id=%FF",
				"duplicate grant":   "grant_type=client_credentials&grant_type=password",
				"array syntax":      "grant_type[]=client_credentials&client_id[]=x",
				"unknown grant":     "grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer",
				"no grant":          "client_id=x&client_secret=y",
				"empty":             "",
				"huge parameter":    "grant_type=password&username=" + strings.Repeat("a", hugeBody),
				"NUL bytes":         "grant_type=password&account_name=a%00b&username=%00&password=%00",
				"JSON body":         `{"grant_type":"client_credentials"}`,
				"whitespace scope":  "grant_type=client_credentials&client_id=x&client_secret=y&scope=%20%20%20",
				"tab scope":         "grant_type=client_credentials&client_id=x&client_secret=y&scope=a%09b",
				"password as token": "grant_type=refresh_token&refresh_token=" + strings.Repeat("x", 5000),
				"token to revoke":   "token=" + strings.Repeat("%FF", 100) + "&token_type_hint=%00",
				"nested-looking":    "grant_type=password&username[$ne]=x&password[$ne]=x&account_name=acme",
			} {
				add(OAuth, what, body(b, op.BodyType))
			}
			add(OAuth, "JSON content type", body(`{"grant_type":"client_credentials"}`, "application/json"))
			add(OAuth, "credentials in two places", func(tg Target) (*http.Request, error) {
				r, err := newRequest(tg, op, nil, nil, "grant_type=client_credentials&client_id=a&client_secret=b", op.BodyType)
				if err == nil {
					r.SetBasicAuth("a", "b")
				}
				return r, err
			})
			add(OAuth, "two Authorization headers", func(tg Target) (*http.Request, error) {
				r, err := newRequest(tg, op, nil, nil, "grant_type=client_credentials", op.BodyType)
				if err == nil {
					r.Header.Add("Authorization", "Basic YTpi")
					r.Header.Add("Authorization", "Basic Yzpk")
				}
				return r, err
			})
			add(OAuth, "Basic with invalid UTF-8 and no colon", func(tg Target) (*http.Request, error) {
				r, err := newRequest(tg, op, nil, nil, "grant_type=client_credentials", op.BodyType)
				if err == nil {
					r.Header.Set("Authorization", "Basic /w==")
				}
				return r, err
			})
		}
		for _, p := range op.PathParams {
			for what, v := range map[string]string{
				"invalid UTF-8": "%FF%FE", "NUL": "a%00b", "operator": "%24ne", "dots": "..",
				"long": strings.Repeat("a", 4096), "spaces": "%20", "JSON": "%7B%22%24gt%22%3A%22%22%7D",
			} {
				add(UTF8, "path "+p+" "+what, func(tg Target) (*http.Request, error) {
					return newRequest(tg, op, map[string]string{p: v}, nil, validBody(op), op.BodyType)
				})
			}
		}
		for _, q := range op.Query {
			values := []string{"%FF%FE", "%00", strings.Repeat("9", 400), "-1", "%24ne", "a&" + q.Name + "=b", "%zz"}
			family := UTF8
			if q.Format == "date-time" {
				family = OddDate
				for _, d := range oddDates {
					values = append(values, urlEscape(d))
				}
			}
			if strings.Contains(strings.ToLower(q.Name), "cursor") || q.Name == "after" || q.Name == "before" || q.Name == "page" {
				family = Cursor
				values = append(values, "eyJ0IjoiMDAwMC0wMS0wMVQwMDowMDowMFoiLCJpIjoiJG5lIn0", "AAAA", strings.Repeat("A", 8000), "e30", "eyJ0Ijp7IiRndCI6IiJ9fQ")
			}
			for _, v := range values {
				add(family, fmt.Sprintf("query %s=%.40s", q.Name, v), func(tg Target) (*http.Request, error) {
					return newRequest(tg, op, nil, map[string]string{q.Name: v}, validBody(op), op.BodyType)
				})
			}
		}
		if op.Secured {
			for what, v := range forgedTokens {
				if !firstSecured && !everyRouteTokens[what] {
					continue
				}
				add(ForgedToken, what, func(tg Target) (*http.Request, error) {
					r, err := newRequest(tg, op, nil, nil, validBody(op), op.BodyType)
					if err == nil {
						r.Header.Set("Authorization", v)
					}
					return r, err
				})
			}
			add(ForgedToken, "valid token, signature altered", func(tg Target) (*http.Request, error) {
				r, err := newRequest(tg, op, nil, nil, validBody(op), op.BodyType)
				if err == nil {
					r.Header.Set("Authorization", "Bearer "+alterSignature(tg.Bearer))
				}
				return r, err
			})
			add(ForgedToken, "valid token, payload altered", func(tg Target) (*http.Request, error) {
				r, err := newRequest(tg, op, nil, nil, validBody(op), op.BodyType)
				if err == nil {
					r.Header.Set("Authorization", "Bearer "+alterPayload(tg.Bearer))
				}
				return r, err
			})
			add(Headers, "two Authorization headers", func(tg Target) (*http.Request, error) {
				r, err := newRequest(tg, op, nil, nil, validBody(op), op.BodyType)
				if err == nil {
					r.Header.Add("Authorization", "Bearer not-a-token")
				}
				return r, err
			})
			firstSecured = false
		}
		add(Headers, "60 KiB header", func(tg Target) (*http.Request, error) {
			r, err := newRequest(tg, op, nil, nil, validBody(op), op.BodyType)
			if err == nil {
				r.Header.Set("X-Padding", strings.Repeat("a", 60<<10))
			}
			return r, err
		})
		add(Headers, "hostile request id and forwarded-for", func(tg Target) (*http.Request, error) {
			r, err := newRequest(tg, op, nil, nil, validBody(op), op.BodyType)
			if err == nil {
				r.Header.Set("X-Request-ID", "\xff\"}{"+strings.Repeat("x", 300))
				r.Header.Set("X-Forwarded-For", "not-an-ip, 999.1.1.1, ::ffff:zz")
				r.Header.Set("If-Match", strings.Repeat(`"x",`, 500))
				r.Header.Set("Idempotency-Key", "\xff\xfe"+strings.Repeat("k", 1000))
				r.Header.Set("Accept", "application/xml;q=1.5, */*;q=abc")
			}
			return r, err
		})
		if op.BodyType != "" {
			add(Headers, "two Content-Type headers", func(tg Target) (*http.Request, error) {
				r, err := newRequest(tg, op, nil, nil, validBody(op), op.BodyType)
				if err == nil {
					r.Header.Add("Content-Type", "text/plain")
				}
				return r, err
			})
			add(Headers, "Content-Type with odd parameters", func(tg Target) (*http.Request, error) {
				return newRequest(tg, op, nil, nil, validBody(op), op.BodyType+`; charset=utf-7; boundary="`)
			})
		}
	}
	return out
}

func duplicateKeys(op openapitest.Operation) string {
	if len(op.Body) == 0 {
		return `{"a":1,"a":2}`
	}
	f := op.Body[0].Name
	return `{"` + f + `":"x","` + f + `":{"$ne":null}}`
}

// validBody is a body that decodes, for the cases that vary something
// else: an empty object (or form).
func validBody(op openapitest.Operation) string {
	if op.BodyType == "application/json" {
		return `{}`
	}
	return ""
}

func urlEscape(s string) string {
	return strings.NewReplacer("+", "%2B", ":", "%3A", " ", "%20").Replace(s)
}

func alterSignature(tok string) string {
	if tok == "" {
		return "x.y.z"
	}
	b := []byte(tok)
	i := len(b) - 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func alterPayload(tok string) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "x.y.z"
	}
	parts[1] = b64(`{"sub":"someone-else","account_id":"another","exp":4102444800,"iss":"x","aud":"y"}`)
	return strings.Join(parts, ".")
}

// newRequest builds a request for op: path parameters from over, else
// tg.PathValues, else "x" (raw: over's values are sent as written, escapes
// and all); query parameters as given (raw); the bearer token when op is
// secured.
func newRequest(tg Target, op openapitest.Operation, over, query map[string]string, body, contentType string) (*http.Request, error) {
	path := op.Path
	for _, p := range op.PathParams {
		v, ok := over[p]
		if !ok {
			v = cmp.Or(tg.PathValues[p], "x")
		}
		path = strings.ReplaceAll(path, "{"+p+"}", v)
	}
	var q []string
	for k, v := range query {
		q = append(q, k+"="+v)
	}
	target := tg.URL + path
	if len(q) > 0 {
		target += "?" + strings.Join(q, "&")
	}
	var rd io.Reader
	if op.BodyType != "" || body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(op.Method, tg.URL, rd)
	if err != nil {
		return nil, err
	}
	// Set the raw target as written: url.Parse would refuse %zz and
	// friends, which are the point.
	r.URL.Opaque = strings.TrimPrefix(target, tg.URL)
	if i := strings.IndexByte(r.URL.Opaque, '?'); i >= 0 {
		r.URL.RawQuery = r.URL.Opaque[i+1:]
		r.URL.Opaque = r.URL.Opaque[:i]
	}
	if contentType != "" && rd != nil {
		r.Header.Set("Content-Type", contentType)
	}
	if op.Secured && tg.Bearer != "" {
		r.Header.Set("Authorization", "Bearer "+tg.Bearer)
	}
	return r, nil
}

// leaks are what no body may carry: driver and store messages, file paths,
// Go type names and runtime details.
var leaks = regexp.MustCompile(`(?i)mongo|bson|ferret|sqlite|\w\.go\b|\.go:\d|/root/|/home/|/tmp/|/usr/|goroutine|runtime\.|panic|\bstruct ?\{|\bmap\[|\[\]interface|\*http\.|\becho\.|\bjson: |reflect\.|main\.|context deadline|connection refused|\bE\d{5}\b|duplicate key|unmarshal`)

// result is what the client saw of one case.
type result struct {
	c         Case
	status    int
	header    http.Header
	body      []byte
	requestID string
}

// Run sends every case (a few at once) and checks each answer, then that
// the access log and the metrics recorded exactly the statuses the client
// saw.
func Run(t *testing.T, tg Target, cases []Case) {
	t.Helper()
	before := statusCounts(t, tg.Metrics)
	results := make([]result, len(cases))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				results[i] = send(t, tg, cases[i])
			}
		})
	}
	for i := range cases {
		next <- i
	}
	close(next)
	wg.Wait()

	families := map[string]int{}
	client := map[int]int{}
	for _, r := range results {
		if r.c.Name == "" {
			continue // the request could not be sent; reported
		}
		families[r.c.Family]++
		client[r.status]++
		checkAnswer(t, r)
	}
	t.Logf("%d hostile requests: %v; statuses %v", len(cases), families, client)

	// The log: one line per answer, with its request id and status.
	logged := map[string][]int{}
	for line := range bytes.SplitSeq(tg.Log(), []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l struct {
			RequestID string `json:"request_id"`
			Status    int    `json:"status"`
			Msg       string `json:"msg"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Errorf("access log line is not JSON: %v: %.200s", err, line)
			continue
		}
		if l.RequestID != "" && l.Msg == "http request" {
			logged[l.RequestID] = append(logged[l.RequestID], l.Status)
		}
	}
	for _, r := range results {
		if r.c.Name == "" {
			continue
		}
		if got := logged[r.requestID]; len(got) != 1 || got[0] != r.status {
			t.Errorf("%s: the client got %d (X-Request-ID %q), the access log has %v", r.c.Name, r.status, r.requestID, got)
		}
	}
	// The metrics: as many samples of each status as the client saw.
	after := statusCounts(t, tg.Metrics)
	for status := range mergeKeys(client, after) {
		if got := after[status] - before[status]; got != client[status] {
			t.Errorf("status %d: the client got %d, the metrics counted %d", status, client[status], got)
		}
	}
}

func mergeKeys(a, b map[int]int) map[int]bool {
	out := map[int]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func send(t *testing.T, tg Target, c Case) result {
	req, err := c.build(tg)
	if err != nil {
		t.Errorf("%s: building the request: %v", c.Name, err)
		return result{}
	}
	resp, err := tg.Client.Do(req)
	if err != nil {
		t.Errorf("%s: %v", c.Name, err)
		return result{}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s: reading the answer: %v", c.Name, err)
		return result{}
	}
	return result{c: c, status: resp.StatusCode, header: resp.Header, body: body, requestID: resp.Header.Get("X-Request-ID")}
}

// checkAnswer checks one answer: no 5xx; an error is problem+json, or
// RFC 6749 JSON or an HTML page on /oauth2/*; nothing internal in the
// body.
func checkAnswer(t *testing.T, r result) {
	t.Helper()
	if r.status >= 500 {
		t.Errorf("%s: %d %.300s", r.c.Name, r.status, r.body)
		return
	}
	mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
	// Errors in JSON are the service's own words. Other answers carry data
	// and documents: random key material and tokens (a JWKS modulus once
	// held "bSoN"), an OpenAPI description that names its database.
	if loc := leaks.FindIndex(r.body); loc != nil && r.status >= 400 && strings.HasSuffix(mt, "json") {
		t.Errorf("%s: the body carries %q: %.300s", r.c.Name, r.body[loc[0]:loc[1]], r.body)
	}
	if r.requestID == "" {
		t.Errorf("%s: %d without X-Request-ID", r.c.Name, r.status)
	}
	if r.status < 400 {
		return
	}
	if strings.HasPrefix(r.c.Op.Path, "/oauth2/") && mt == "text/html" {
		// The sign-in flow's endpoints answer a browser: its errors are
		// pages for a person (the status is still the decision's).
		return
	}
	if strings.HasPrefix(r.c.Op.Path, "/oauth2/") && mt == "application/json" {
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(r.body, &e); err != nil || e.Error == "" {
			t.Errorf("%s: %d, not an RFC 6749 error: %v %.300s", r.c.Name, r.status, err, r.body)
		}
		return
	}
	if mt != "application/problem+json" {
		t.Errorf("%s: %d with Content-Type %q, want application/problem+json: %.300s", r.c.Name, r.status, r.header.Get("Content-Type"), r.body)
		return
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil || p.Type == "" || p.Title == "" || p.Code == "" || p.Status != r.status {
		t.Errorf("%s: %d, not a complete problem (%v): %.300s", r.c.Name, r.status, err, r.body)
	}
	if r.status == http.StatusUnauthorized && !strings.HasPrefix(r.c.Op.Path, "/oauth2/") && r.c.Op.Secured &&
		!strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("%s: 401 without WWW-Authenticate: Bearer", r.c.Name)
	}
}

// statusCounts sums the samples of http_request_duration_seconds by
// status.
func statusCounts(t *testing.T, g prometheus.Gatherer) map[int]int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	out := map[int]int{}
	for _, mf := range mfs {
		if mf.GetName() != "http_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" {
					s, _ := strconv.Atoi(l.GetValue())
					out[s] += int(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return out
}

// Log is an access log kept in memory (JSON lines), safe for the
// concurrent writes of a server: Target.Log is its Bytes, and its Logger
// the service's.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// Bytes returns a copy of what was logged so far.
func (l *Log) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

// Logger writes JSON lines to l, from level Info.
func (l *Log) Logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }
