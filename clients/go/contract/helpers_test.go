package contract_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/testkit/openapitest"
)

const (
	testAccount  = "acme"
	testUser     = "alice"
	testPassword = "pw-alice-S3cret!"
)

// clock is an adjustable clock for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)} }

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

type refreshMode int

const (
	refreshNotDeployed refreshMode = iota // 404 not_found, like an unknown route
	refreshWorks                          // 200 for an unused refresh token, 401 invalid_token otherwise
	refreshRevoked                        // 401 invalid_token for every refresh token
)

// fake imitates the account and the conversations services: the routes of
// their OpenAPI documents (POST /token/refresh also as an older service
// without it answers: 404), problem
// bodies written by pkg/problem, Link headers as the real service builds
// them, X-Request-ID on every response. Every exchange on a documented route
// is checked against the OpenAPI documents, so that the fake stays true to
// the contract, and so do the client's requests.
type fake struct {
	t             testing.TB
	account, conv *httptest.Server

	mu           sync.Mutex
	expiresIn    int
	refreshMode  refreshMode
	renewDelay   time.Duration // slows /login and /token/refresh down
	seq          int
	bearers      map[string]string // valid id and access tokens → user id
	refreshes    map[string]string // unused refresh tokens → user id
	logins       int
	refreshCalls int
	hits         map[string]int // "GET /v1/conversations" → requests
	uris         []string       // request URIs, in order
	auth         []string       // Authorization headers of resource requests, in order
	loginBodies  []string
	refreshBody  []string
	issued       []string // refresh tokens, in the order issued
	defs         []map[string]any
	convs        []client.Conversation // newest first
	versions     map[string]int        // conversation id → version (its ETag is "v<version>")
	msgs         map[string][]client.Message
	// requests records the requests to the conversations service with a
	// body or precondition: method, path, header fields, body.
	requests []recorded
	// idempotency: saved first responses by caller, path and key.
	idemMu sync.Mutex
	saved  map[string]savedResponse
	// service clients of the token endpoint: client id → secret, scopes.
	clients    map[string]fakeClient
	tokenCalls int
	// tokenFailure, when 429 or 503, is the token endpoint's answer.
	tokenFailure int
	tokenReqs    []recorded
	scopes       map[string][]string // client id → the scopes of its latest token
	// hook, when set, may answer a request itself (returning true); such
	// deliberately off-contract answers are not checked.
	hook func(w http.ResponseWriter, r *http.Request) bool
	// drop, when it returns true for a request, lets the fake handle it
	// and then closes the connection without answering: a response lost
	// on the way back.
	drop func(r *http.Request) bool
	// invalidRequests: the test sends deliberately invalid requests, so
	// only the responses are checked.
	invalidRequests bool
}

var (
	docsOnce                sync.Once
	accountDoc, convDoc     *openapitest.Validator
	accountDocErr, convDocE error
)

// contracts loads the OpenAPI documents of both services from this
// repository, once.
func contracts(t testing.TB) (*openapitest.Validator, *openapitest.Validator) {
	docsOnce.Do(func() {
		load := func(path string) (*openapitest.Validator, error) {
			spec, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			return openapitest.New(spec)
		}
		accountDoc, accountDocErr = load("../../../services/account/http/openapi.yaml")
		convDoc, convDocE = load("../../../services/conversations/http/openapi.yaml")
	})
	if accountDocErr != nil || convDocE != nil {
		t.Fatalf("OpenAPI documents: %v %v", accountDocErr, convDocE)
	}
	return accountDoc, convDoc
}

func newFake(t testing.TB) *fake {
	f := &fake{
		t: t, expiresIn: 3600,
		bearers: map[string]string{}, refreshes: map[string]string{}, hits: map[string]int{},
		versions: map[string]int{}, msgs: map[string][]client.Message{}, saved: map[string]savedResponse{},
		clients: map[string]fakeClient{}, scopes: map[string][]string{},
	}
	accDoc, cDoc := contracts(t)

	acc := http.NewServeMux()
	acc.HandleFunc("POST /login", f.handleLogin)
	acc.HandleFunc("POST /token/refresh", f.handleRefresh)
	acc.HandleFunc("GET /definitions", f.authed(f.handleDefinitions))
	acc.HandleFunc("POST /oauth2/token", f.handleToken)
	acc.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_ = problem.Write(w, problem.NotFound("No such resource."))
	})
	f.account = httptest.NewServer(f.checked(accDoc, acc))
	t.Cleanup(f.account.Close)

	conv := http.NewServeMux()
	conv.HandleFunc("GET /v1/conversations", f.authed(f.handleList))
	conv.HandleFunc("POST /v1/conversations", f.authed(f.idempotent(f.handleCreate)))
	conv.HandleFunc("GET /v1/conversations/{id}", f.authed(f.handleGet))
	conv.HandleFunc("PATCH /v1/conversations/{id}", f.authed(f.handlePatch))
	conv.HandleFunc("PUT /v1/conversations/{id}/participants/{userId}", f.authed(f.handleParticipant))
	conv.HandleFunc("DELETE /v1/conversations/{id}/participants/{userId}", f.authed(f.handleParticipant))
	conv.HandleFunc("POST /v1/conversations/{id}/messages", f.authed(f.idempotent(f.handlePostMessage)))
	conv.HandleFunc("GET /v1/conversations/{id}/messages", f.authed(f.handleListMessages))
	conv.HandleFunc("GET /v1/conversations/{id}/messages/{messageId}", f.authed(f.handleGetMessage))
	conv.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_ = problem.Write(w, problem.NotFound("No such resource."))
	})
	f.conv = httptest.NewServer(f.checked(cDoc, conv))
	t.Cleanup(f.conv.Close)
	return f
}

// client returns a client of the fake with the clock (nil: time.Now).
func (f *fake) client(t testing.TB, clk *clock) *client.Client {
	t.Helper()
	return f.newClient(t, clk, client.Config{
		Credentials: client.Credentials{AccountName: testAccount, Username: testUser, Password: testPassword},
	})
}

// newClient returns a client of the fake with cfg's credentials and the
// clock (nil: time.Now).
func (f *fake) newClient(t testing.TB, clk *clock, cfg client.Config) *client.Client {
	t.Helper()
	cfg.AccountURL, cfg.ConversationsURL = f.account.URL, f.conv.URL
	if clk != nil {
		cfg.Now = clk.Now
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fake) set(fn func(f *fake)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// strings returns a copy of a recorded list, read under the lock.
func (f *fake) strings(list func(f *fake) []string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), list(f)...)
}

func (f *fake) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[key]
}

func (f *fake) renewals() (logins, refreshes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logins, f.refreshCalls
}

// revokeAll makes every issued bearer token invalid, as a key rotation or a
// revoked session would.
func (f *fake) revokeAll() {
	f.set(func(f *fake) { clear(f.bearers) })
}

// checked counts requests, sets X-Request-ID, and checks each exchange of a
// documented route against doc.
func (f *fake) checked(doc *openapitest.Validator, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBody, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		f.mu.Lock()
		f.hits[r.Method+" "+r.URL.Path]++
		f.uris = append(f.uris, r.URL.RequestURI())
		f.seq++
		id := "req-" + strconv.Itoa(f.seq)
		hook, responseOnly, drop := f.hook, f.invalidRequests, f.drop
		if r.Method != http.MethodGet && r.URL.Path != "/login" && r.URL.Path != "/token/refresh" {
			f.recordLocked(r, reqBody)
		}
		f.mu.Unlock()

		rec := httptest.NewRecorder()
		rec.Header().Set("X-Request-ID", id)
		custom := hook != nil && hook(rec, r)
		if !custom {
			h.ServeHTTP(rec, r)
		}
		res := rec.Result()
		switch {
		// An account service from before POST /token/refresh answers it
		// with 404, which the current document does not describe.
		case custom, r.URL.Path == "/token/refresh" && res.StatusCode == http.StatusNotFound:
		case responseOnly:
			doc.CheckResponse(f.t, r, res, rec.Body.Bytes())
		default:
			doc.Check(f.t, r, reqBody, res, rec.Body.Bytes())
		}
		if drop != nil && drop(r) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				f.t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
			return
		}
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fakeJWT looks like a compact JWS, as the contract's pattern wants.
func fakeJWT(use, sub string, n int) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		enc(fmt.Appendf(nil, `{"sub":%q,"token_use":%q,"n":%d}`, sub, use, n)) + "." + enc([]byte("sig"))
}

// issueLocked mints a token set for sub; f.mu is held.
func (f *fake) issueLocked(sub string) map[string]any {
	f.seq++
	id, access, refresh := fakeJWT("id", sub, f.seq), fakeJWT("access", sub, f.seq), fakeJWT("refresh", sub, f.seq)
	f.bearers[id], f.bearers[access] = sub, sub
	f.refreshes[refresh] = sub
	f.issued = append(f.issued, refresh)
	return map[string]any{"tokens": map[string]any{
		"access_token": access, "refresh_token": refresh, "id_token": id, "expires_in": f.expiresIn,
	}}
}

func (f *fake) handleLogin(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var in struct{ Username, Password, AccountName string }
	if err := json.Unmarshal(body, &in); err != nil {
		_ = problem.Write(w, problem.BadRequest(problem.CodeMalformedJSON, "The request body is not valid JSON."))
		return
	}
	f.mu.Lock()
	f.logins++
	f.loginBodies = append(f.loginBodies, string(body))
	delay := f.renewDelay
	f.mu.Unlock()
	time.Sleep(delay)
	if in.AccountName != testAccount || in.Username != testUser || in.Password != testPassword {
		_ = problem.Write(w, problem.New(http.StatusUnauthorized, problem.CodeInvalidCredentials,
			"The username, password or account name is wrong."))
		return
	}
	f.mu.Lock()
	out := f.issueLocked("usr_alice")
	f.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

func (f *fake) handleRefresh(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.refreshCalls++
	f.refreshBody = append(f.refreshBody, string(body))
	mode, delay := f.refreshMode, f.renewDelay
	f.mu.Unlock()
	time.Sleep(delay)
	switch mode {
	case refreshNotDeployed:
		_ = problem.Write(w, problem.NotFound("No such resource."))
		return
	case refreshRevoked:
		_ = problem.Write(w, problem.InvalidToken("The refresh token was revoked."))
		return
	}
	var in struct {
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		_ = problem.Write(w, problem.BadRequest(problem.CodeMalformedJSON, "The request body is not valid JSON."))
		return
	}
	f.mu.Lock()
	sub, ok := f.refreshes[in.RefreshToken]
	delete(f.refreshes, in.RefreshToken) // single use
	var out map[string]any
	if ok {
		out = f.issueLocked(sub)
	}
	f.mu.Unlock()
	if !ok {
		_ = problem.Write(w, problem.InvalidToken("The refresh token was already used."))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// authed checks the bearer token like the services' middleware.
func (f *fake) authed(next func(w http.ResponseWriter, r *http.Request, sub string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		f.mu.Lock()
		f.auth = append(f.auth, h)
		sub, ok := f.bearers[strings.TrimPrefix(h, "Bearer ")]
		f.mu.Unlock()
		if !strings.HasPrefix(h, "Bearer ") || !ok {
			_ = problem.Write(w, problem.InvalidToken("The bearer token is expired."))
			return
		}
		if isClient(sub) && !f.hasScope(w, sub, r) {
			return
		}
		next(w, r, sub)
	}
}

func (f *fake) handleDefinitions(w http.ResponseWriter, r *http.Request, sub string) {
	f.mu.Lock()
	defs := append([]map[string]any{}, f.defs...)
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, defs)
}

func (f *fake) handleList(w http.ResponseWriter, r *http.Request, sub string) {
	q := r.URL.Query()
	var fields []problem.FieldError
	limit := 10
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || len(v) > 1 || n < 1 || n > 100 {
			fields = append(fields, problem.FieldError{Field: "limit", Reason: "must be an integer from 1 to 100"})
		}
		limit = n
	}
	status := q.Get("status")
	if status != "" && !slices.Contains([]string{"open", "snoozed", "closed"}, status) {
		fields = append(fields, problem.FieldError{Field: "status", Reason: "must be open, snoozed or closed"})
	}
	after := q.Get("updatedAfter")
	var afterTime time.Time
	if after != "" {
		var err error
		if afterTime, err = time.Parse(time.RFC3339Nano, after); err != nil {
			fields = append(fields, problem.FieldError{Field: "updatedAfter", Reason: "must be an RFC 3339 date-time"})
		}
	}
	offset := 0
	if c := q.Get("cursor"); c != "" {
		raw, _ := base64.RawURLEncoding.DecodeString(c)
		parts := strings.Split(string(raw), "|")
		n, err := strconv.Atoi(parts[len(parts)-1])
		if len(parts) != 4 || parts[0] != sub || parts[1] != status || parts[2] != after || err != nil {
			fields = append(fields, problem.FieldError{Field: "cursor",
				Reason: "is not a cursor of this listing: use the next link of the previous page"})
		}
		offset = n
	}
	if len(fields) > 0 {
		_ = problem.Write(w, problem.Validation(fields...))
		return
	}
	f.mu.Lock()
	var mine []client.Conversation
	for _, c := range f.convs {
		if (isClient(sub) || slices.Contains(c.Participants, sub)) && (status == "" || c.Status == status) &&
			(after == "" || c.UpdatedAt.After(afterTime)) {
			mine = append(mine, c)
		}
	}
	f.mu.Unlock()
	page := mine[min(offset, len(mine)):min(offset+limit, len(mine))]
	if offset+limit < len(mine) {
		next := url.Values{}
		next.Set("limit", strconv.Itoa(limit))
		if status != "" {
			next.Set("status", status)
		}
		if after != "" {
			next.Set("updatedAfter", after)
		}
		next.Set("cursor", base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s|%s|%s|%d", sub, status, after, offset+limit)))
		w.Header().Set("Link", `</v1/conversations?`+next.Encode()+`>; rel="next"`)
	}
	if page == nil {
		page = []client.Conversation{}
	}
	writeJSON(w, http.StatusOK, page)
}

func (f *fake) handleCreate(w http.ResponseWriter, r *http.Request, sub string) {
	var in struct {
		Subject       string
		Status        string
		Participants  []string
		LastMessageAt *time.Time
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		_ = problem.Write(w, problem.BadRequest(problem.CodeMalformedJSON, "The request body is not valid JSON."))
		return
	}
	if in.Status == "" {
		in.Status = "open"
	}
	if !slices.Contains([]string{"open", "snoozed", "closed"}, in.Status) {
		_ = problem.Write(w, problem.Validation(problem.FieldError{Field: "status", Reason: "must be open, snoozed or closed"}))
		return
	}
	if !slices.Contains(in.Participants, sub) && !isClient(sub) {
		in.Participants = append([]string{sub}, in.Participants...)
	}
	f.mu.Lock()
	f.seq++
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(f.seq) * time.Second)
	c := client.Conversation{
		ID: fmt.Sprintf("cnv_%04d", f.seq), Subject: in.Subject, Status: in.Status,
		Participants: in.Participants, CreatedAt: at, UpdatedAt: at, LastMessageAt: in.LastMessageAt,
	}
	f.convs = append([]client.Conversation{c}, f.convs...)
	f.versions[c.ID] = 1
	f.writeConversationLocked(w, http.StatusCreated, 0)
	f.mu.Unlock()
}

func (f *fake) handleGet(w http.ResponseWriter, r *http.Request, sub string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := f.visibleLocked(r.PathValue("id"), sub); i >= 0 {
		f.writeConversationLocked(w, http.StatusOK, i)
		return
	}
	_ = problem.Write(w, problem.NotFound("No conversation with this id among yours."))
}

// seed creates n conversations of alice directly in the store: subjects
// "c0" (oldest) to "c<n-1>" (newest).
func (f *fake) seed(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range n {
		f.seq++
		at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(f.seq) * time.Second)
		f.convs = append([]client.Conversation{{
			ID: fmt.Sprintf("cnv_%04d", f.seq), Subject: fmt.Sprintf("c%d", i), Status: "open",
			Participants: []string{"usr_alice"}, CreatedAt: at, UpdatedAt: at,
		}}, f.convs...)
		f.versions[f.convs[0].ID] = 1
	}
}
