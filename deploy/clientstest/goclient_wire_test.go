package clientstest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/pkg/testkit/openapitest"
)

// goSuite is the Go client's suite (clients/go). It runs in the test
// process, against the services TestClients started, in an account of its
// own ("go"), as the other clients' suites run in theirs. Its tests are
// the methods named in goTests; each gets a wire (newWire) with a user of
// its own, so that what one test creates never shows in another's
// listings.
type goSuite struct {
	st  *stack
	env map[string]string
	// accountDoc and convDoc check every exchange on the wire.
	accountDoc, convDoc *openapitest.Validator
	users               atomic.Int32
}

func newGoSuite(t *testing.T, st *stack, env []string) *goSuite {
	t.Helper()
	g := &goSuite{st: st, env: map[string]string{}}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		g.env[strings.TrimPrefix(k, "ACME_TEST_")] = v
	}
	root := filepath.Join("..", "..")
	g.accountDoc = openapitest.LoadFile(t, filepath.Join(root, "services", "account", "http", "openapi.yaml"))
	g.convDoc = openapitest.LoadFile(t, filepath.Join(root, "services", "conversations", "http", "openapi.yaml"))
	return g
}

// goShards is how many accounts the Go client's tests are spread over.
const goShards = 3

// runGoSuite runs the Go client's tests in goShards groups side by side,
// each group one test after another in an account of its own (tests of one
// account share its conversations); most of their time is spent waiting
// on the services.
func runGoSuite(t *testing.T, st *stack) {
	var shards sync.WaitGroup
	for shard := range goShards {
		shards.Go(func() {
			t.Run(fmt.Sprintf("shard%d", shard+1), func(t *testing.T) {
				g := newGoSuite(t, st, st.seed(t, fmt.Sprintf("go-%d", shard+1)))
				for i, tc := range goTests(g) {
					if i%goShards == shard {
						t.Run(tc.name, tc.run)
					}
				}
			})
		})
	}
	// The policies on the same services, with an account of their own:
	// another pair of services would cost a start-up for nothing.
	shards.Go(func() { t.Run("policies", func(t *testing.T) { runGoPolicies(t, st) }) })
	shards.Wait()
}

// namedTest is one test of the Go suite.
type namedTest struct {
	name string
	run  func(t *testing.T)
}

// standInRequestID is the X-Request-ID of the answers of a stand-in.
const standInRequestID = "req-stand-in"

// userID is a user id of the form the account service makes ("usr_" and
// 24 hex digits), derived from name: a participant who need not exist.
func userID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "usr_" + hex.EncodeToString(sum[:12])
}

// Ids of the services' form that name nothing.
const (
	missingConversation = "cnv_000000000000000000000000"
	missingMessage      = "msg_000000000000000000000000"
)

// refreshMode is how POST /token/refresh behaves on the wire.
type refreshMode int

const (
	// refreshWorks: the service's own answers.
	refreshWorks refreshMode = iota
	// refreshNotDeployed: 404 not_found, as an account service from before
	// POST /token/refresh answers (a stand-in: today's service has it).
	refreshNotDeployed
	// refreshRevoked: the session was revoked behind the client's back
	// (POST /logout with its refresh token, on the way to the refresh):
	// the service's own 401.
	refreshRevoked
)

// recorded is one request as it went over the wire.
type recorded struct {
	Method, Path string
	Header       http.Header
	Body         string
}

// wire is a user of the Go suite's account and a recording proxy in front
// of each real service: it counts and records the client's requests,
// checks every exchange against the services' OpenAPI documents, and
// injects what the real services cannot be made to do on demand (each such
// case says so where it is set): a slow renewal, a revoked token, an
// answer off the contract. A lost response is the suites' fault proxy's
// (faultProxy).
type wire struct {
	t             *testing.T
	g             *goSuite
	account, conv *httptest.Server
	// username, password and userID are the wire's own user; accountName
	// its account.
	accountName, username, password, userID string
	// clientID and clientSecret are the service client addClient made.
	clientID, clientSecret string

	mu           sync.Mutex
	expiresIn    int // > 0: the expires_in the token responses are given (the services' own is the stack's TTL)
	refreshMode  refreshMode
	renewDelay   time.Duration // slows /login, /token/refresh and /oauth2/token down
	hits         map[string]int
	uris         []string // request URIs, in order
	auth         []string // Authorization headers of resource requests, in order
	loginBodies  []string
	refreshBody  []string
	issued       []string // refresh tokens, in the order issued
	logins       int
	refreshCalls int
	tokenCalls   int
	bearers      []string        // every id and access token issued on the wire
	revoked      map[string]bool // bearer tokens the wire breaks on their way (revokeAll)
	revokeEvery  bool            // the wire breaks every bearer token
	requests     []recorded      // requests with a body or precondition, to the conversations service
	tokenReqs    []recorded      // requests to POST /oauth2/token
	// hook, when set, may answer a request itself (returning true): a
	// stand-in for an answer the real services never give on demand; such
	// answers are not checked against the documents.
	hook func(w http.ResponseWriter, r *http.Request) bool
	// invalidRequests: the test sends deliberately invalid requests, so
	// only the responses are checked.
	invalidRequests bool
}

// newWire creates a user of its own in the suite's account and the proxies
// of the test.
func (g *goSuite) newWire(t *testing.T) *wire {
	t.Helper()
	return g.newWireInAccount(t, "")
}

// newWireInAccount is newWire in a new account of this name, for a test
// that sees the whole account (its definitions, or every conversation as a
// service client); "" is the suite's account.
func (g *goSuite) newWireInAccount(t *testing.T, account string) *wire {
	t.Helper()
	seeded := &seededAccount{s: g.st, name: g.env["ACCOUNT_NAME"], clientID: g.env["CLIENT_ID"], clientSecret: g.env["CLIENT_SECRET"]}
	if account != "" {
		seeded = g.st.newAccount(t, account)
	}
	f := &wire{t: t, g: g, hits: map[string]int{}, revoked: map[string]bool{}, accountName: seeded.name}
	f.username = fmt.Sprintf("user%d", g.users.Add(1))
	f.password = randomSecret(t)
	f.userID = seeded.createUser(t, f.username, f.password)
	f.account = httptest.NewServer(f.proxy(g.accountDoc, g.st.accountURL))
	t.Cleanup(f.account.Close)
	f.conv = httptest.NewServer(f.proxy(g.convDoc, g.st.convURL))
	t.Cleanup(f.conv.Close)
	return f
}

// client returns a client of the wire's user with the clock (nil: time.Now).
func (f *wire) client(t testing.TB, clk *clock) *client.Client {
	t.Helper()
	return f.newClient(t, clk, client.Config{
		Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password},
	})
}

// newClient returns a client of the wire with cfg's credentials and the
// clock (nil: time.Now).
func (f *wire) newClient(t testing.TB, clk *clock, cfg client.Config) *client.Client {
	t.Helper()
	cfg.AccountURL, cfg.ConversationsURL = f.account.URL, f.conv.URL
	if cfg.HTTPClient == nil {
		// No timeout: the client's default (DefaultTimeout) is for
		// production, not a bound that a loaded machine moving a body of
		// MaxBodyBytes under -race must beat. The test's -timeout bounds a
		// hang.
		cfg.HTTPClient = &http.Client{}
	}
	if clk != nil {
		cfg.Now = clk.Now
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *wire) set(fn func(f *wire)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// strings returns a copy of a recorded list, read under the lock.
func (f *wire) strings(list func(f *wire) []string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), list(f)...)
}

func (f *wire) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[key]
}

func (f *wire) renewals() (logins, refreshes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logins, f.refreshCalls
}

// revokeAll makes every bearer token issued so far invalid, as a key
// rotation would. The services cannot be made to refuse a token before it
// expires, so the wire breaks the signature of such a token on its way:
// the 401 the client gets is the service's own.
func (f *wire) revokeAll() {
	f.set(func(f *wire) {
		for _, b := range f.bearers {
			f.revoked[b] = true
		}
	})
}

// recordedRequests returns the recorded requests of method to paths with
// the prefix.
func (f *wire) recordedRequests(method, pathPrefix string) []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []recorded
	for _, r := range f.requests {
		if r.Method == method && strings.HasPrefix(r.Path, pathPrefix) {
			out = append(out, r)
		}
	}
	return out
}

func (f *wire) tokenRequests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.tokenReqs...)
}

// isResource says whether a request carries a bearer token.
func isResource(path string) bool {
	return path != "/login" && path != "/token/refresh" && path != "/logout" && path != "/oauth2/token"
}

// proxy forwards to the service at upstream, recording, checking against
// doc and injecting as the wire is set.
func (f *wire) proxy(doc *openapitest.Validator, upstream string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBody, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		f.mu.Lock()
		f.hits[r.Method+" "+r.URL.Path]++
		f.uris = append(f.uris, r.URL.RequestURI())
		hook, responseOnly, delay, mode := f.hook, f.invalidRequests, f.renewDelay, f.refreshMode
		rec := recorded{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header.Clone(), Body: string(reqBody)}
		switch {
		case r.URL.Path == "/login":
			f.logins++
			f.loginBodies = append(f.loginBodies, string(reqBody))
		case r.URL.Path == "/token/refresh":
			f.refreshCalls++
			f.refreshBody = append(f.refreshBody, string(reqBody))
		case r.URL.Path == "/oauth2/token":
			f.tokenCalls++
			f.tokenReqs = append(f.tokenReqs, rec)
		default:
			f.auth = append(f.auth, r.Header.Get("Authorization"))
			if r.Method != http.MethodGet {
				f.requests = append(f.requests, rec)
			}
		}
		bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		revoked := bearer != "" && isResource(r.URL.Path) && (f.revoked[bearer] || f.revokeEvery)
		f.mu.Unlock()
		if !isResource(r.URL.Path) {
			time.Sleep(delay)
		}

		res := httptest.NewRecorder()
		// A stand-in's answer has a request id of its own, as every
		// answer of the services has.
		res.Header().Set("X-Request-ID", standInRequestID)
		custom := hook != nil && hook(res, r)
		if !custom {
			res.Header().Del("X-Request-ID")
		}
		if !custom && r.URL.Path == "/token/refresh" && mode == refreshNotDeployed {
			res.Header().Set("X-Request-ID", standInRequestID)
			res.Header().Set("Content-Type", "application/problem+json")
			res.WriteHeader(http.StatusNotFound)
			_, _ = res.WriteString(`{"type":"urn:problem-type:not_found","title":"Not Found","status":404,"code":"not_found","detail":"No such resource."}`)
			custom = true
		}
		if !custom {
			out := reqBody
			if r.URL.Path == "/token/refresh" && mode == refreshRevoked {
				f.logout(upstream, reqBody)
			}
			header := r.Header.Clone()
			if revoked {
				header.Set("Authorization", "Bearer "+breakSignature(bearer))
			}
			f.forward(res, r, upstream, header, out)
		}
		result := res.Result()
		body := res.Body.Bytes()
		if !custom {
			body = f.noteTokens(r.URL.Path, result, body)
			switch {
			case responseOnly:
				doc.CheckResponse(f.t, r, result, body)
			default:
				doc.Check(f.t, r, reqBody, result, body)
			}
		}
		for k, v := range result.Header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(result.StatusCode)
		_, _ = w.Write(body)
	})
}

// forward sends r with header and body to upstream and writes the
// service's answer to res.
func (f *wire) forward(res http.ResponseWriter, r *http.Request, upstream string, header http.Header, body []byte) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		f.t.Errorf("forward: %v", err)
		res.WriteHeader(http.StatusBadGateway)
		return
	}
	out.Header = header
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		f.t.Errorf("forward %s %s: %v", r.Method, r.URL, err)
		res.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		res.Header()[k] = v
	}
	res.Header().Del("Content-Length")
	res.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(res, resp.Body)
}

// logout revokes the session of the refresh token in a /token/refresh
// body, behind the client's back.
func (f *wire) logout(upstream string, refreshBody []byte) {
	resp, err := http.Post(upstream+"/logout", "application/json", bytes.NewReader(refreshBody))
	if err != nil {
		f.t.Errorf("logout: %v", err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		f.t.Errorf("logout: %d", resp.StatusCode)
	}
}

// noteTokens records the tokens of a token response, and gives it the
// wire's expires_in when one is set: the services' token lifetime is the
// stack's, and what the client does with other lifetimes is what the
// tests ask.
func (f *wire) noteTokens(path string, res *http.Response, body []byte) []byte {
	if res.StatusCode != http.StatusOK || (path != "/login" && path != "/token/refresh" && path != "/oauth2/token") {
		return body
	}
	var doc map[string]any
	if json.Unmarshal(body, &doc) != nil {
		return body
	}
	tokens := doc
	if nested, ok := doc["tokens"].(map[string]any); ok {
		tokens = nested
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, name := range []string{"id_token", "access_token"} {
		if s, ok := tokens[name].(string); ok {
			f.bearers = append(f.bearers, s)
		}
	}
	if s, ok := tokens["refresh_token"].(string); ok {
		f.issued = append(f.issued, s)
	}
	if f.expiresIn == 0 {
		return body
	}
	tokens["expires_in"] = f.expiresIn
	out, err := json.Marshal(doc)
	if err != nil {
		return body
	}
	return out
}

// seed creates n conversations of the wire's user through the API (with a
// client of its own): subjects "c0" (oldest) to "c<n-1>" (newest).
func (f *wire) seed(n int) []client.Conversation {
	f.t.Helper()
	c := f.direct(f.t)
	var out []client.Conversation
	for i := range n {
		conv, err := c.CreateConversation(f.t.Context(), client.NewConversation{Subject: fmt.Sprintf("c%d", i)})
		if err != nil {
			f.t.Fatalf("seed: %v", err)
		}
		out = append(out, conv)
	}
	return out
}

// direct is a client of the wire's user straight to the services, for a
// test's preparations, which the wire does not record.
func (f *wire) direct(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{AccountURL: f.g.st.accountURL, ConversationsURL: f.g.st.convURL,
		Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createDefinition creates a definition of body with c's token, through
// the wire (the Go client reads definitions only).
func (f *wire) createDefinition(t *testing.T, c *client.Client, body string) client.Definition {
	t.Helper()
	tok, err := c.IDToken(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.account.URL+"/definitions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d client.Definition
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&d) != nil {
		t.Fatalf("POST /definitions: %d", resp.StatusCode)
	}
	return d
}

// faultProxy opens a proxy of the suites' FaultProxy in front of upstream
// (the wire's own URL, so that the wire records what passes, or a
// service's when the wire would buffer a stream) and returns it; the
// test's cleanup closes it.
func (f *wire) faultProxy(t *testing.T, upstream string, spec faultSpec) *dropProxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p, err := startDropProxy(u, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.server.Close() })
	return p
}

// requests returns what the proxy forwarded so far.
func (p *dropProxy) requests() []Forwarded {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Forwarded(nil), p.forwarded...)
}

// otherClient is a client of the suite's second user (ACME_TEST_OTHER_*),
// straight to the services.
func (g *goSuite) otherClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{AccountURL: g.st.accountURL, ConversationsURL: g.st.convURL,
		Credentials: client.Credentials{AccountName: g.env["ACCOUNT_NAME"], Username: g.env["OTHER_USERNAME"], Password: g.env["OTHER_PASSWORD"]}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clock is an adjustable clock for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// newClock starts at a whole second, as a Retry-After date has no finer
// resolution.
func newClock() *clock { return &clock{t: time.Now().Truncate(time.Second)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// writeJSON answers a stand-in's JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func subjects(t *testing.T, seq func(func(client.Conversation, error) bool)) []string {
	t.Helper()
	var out []string
	for conv, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, conv.Subject)
	}
	return out
}

func bodies(t *testing.T, seq func(func(client.Message, error) bool)) []string {
	t.Helper()
	var out []string
	for m, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m.Body)
	}
	return out
}
