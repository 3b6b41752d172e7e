// Package e2e runs the real service binaries, built from this workspace, as
// separate processes against one database: what a user runs, checked from
// the outside over HTTP.
package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/deploy/internal/svcproc"
	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds both service binaries once per test run (or takes the
// prebuilt ones of make test: svcproc.Binaries).
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binDir, buildErr = svcproc.Binaries(context.Background(), dir, "account", "conversations")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// process is one running service binary.
type process struct{ *svcproc.Process }

// start runs bin with env and waits until its /readyz answers 200; the
// test's cleanup kills it if it still runs.
func start(t *testing.T, bin string, env []string, opsAddr string) *process {
	t.Helper()
	p, err := svcproc.Start(context.Background(), bin, env, opsAddr, svcproc.ReadyWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return &process{p}
}

// stop sends SIGTERM and requires a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// stack is an account and a conversations service on one database.
type stack struct {
	bin, accountURL, convURL string
	accountOps, convOps      string
	accountDB                string
	accountEnv, convEnv      []string
}

// newStack is a stack on fresh databases of the shared test server, with
// account acme and its users alice and bob.
func newStack(t *testing.T, accountExtraEnv ...string) *stack {
	t.Helper()
	s := stackOn(t, mongotest.URI(t), mongotest.New(t).Name(), mongotest.New(t).Name(), accountExtraEnv...)
	provisionUsers(t, s.bin, s.accountEnv, "alice", "bob")
	return s
}

// stackOn is the configuration of a stack on the databases accDB and
// convDB of the server at uri, on free addresses; nothing is started or
// stored yet.
func stackOn(t *testing.T, uri, accDB, convDB string, accountExtraEnv ...string) *stack {
	t.Helper()
	s := &stack{bin: binaries(t), accountDB: accDB}
	accAddr, convAddr := svcproc.FreeAddrForTest(t), svcproc.FreeAddrForTest(t)
	s.accountOps, s.convOps = svcproc.FreeAddrForTest(t), svcproc.FreeAddrForTest(t)
	s.accountURL, s.convURL = "http://"+accAddr, "http://"+convAddr
	s.accountEnv = append([]string{
		"ACCOUNT_MONGODB_URI=" + uri, "ACCOUNT_MONGODB_DATABASE=" + accDB,
		"ACCOUNT_HTTP_ADDR=" + accAddr, "ACCOUNT_OPS_ADDR=" + s.accountOps,
		"ACCOUNT_ISSUER=" + s.accountURL,
		"ACCOUNT_ARGON2_MEMORY_KIB=1024", "ACCOUNT_ARGON2_ITERATIONS=1",
	}, accountExtraEnv...)
	s.convEnv = []string{
		"CONVERSATIONS_MONGODB_URI=" + uri, "CONVERSATIONS_MONGODB_DATABASE=" + convDB,
		"CONVERSATIONS_HTTP_ADDR=" + convAddr, "CONVERSATIONS_OPS_ADDR=" + s.convOps,
		"CONVERSATIONS_JWKS_URL=" + s.accountURL + "/.well-known/jwks.json",
		"CONVERSATIONS_ISSUER=" + s.accountURL,
		"CONVERSATIONS_JWKS_MIN_REFRESH_INTERVAL=1s",
		// One replica: its own changes wake its relay at once; the poll,
		// which looks for other replicas' changes, would only load the
		// shared embedded store (TestEventsOrderedAcrossReplicas sets it back).
		"CONVERSATIONS_EVENTS_POLL_INTERVAL=5s",
		// No endpoints but in TestWebhooks, which sets its own.
		"CONVERSATIONS_WEBHOOK_POLL_INTERVAL=10s",
	}
	return s
}

func (s *stack) startAccount(t *testing.T, extraEnv ...string) *process {
	return start(t, filepath.Join(s.bin, "account"), append(append([]string{}, s.accountEnv...), extraEnv...), s.accountOps)
}

func (s *stack) startConversations(t *testing.T) *process {
	return start(t, filepath.Join(s.bin, "conversations"), s.convEnv, s.convOps)
}

func (s *stack) login(t *testing.T, user string) token.Set {
	t.Helper()
	body := fmt.Sprintf(`{"username":%q,"password":%q,"accountName":"acme"}`, user, userPassword(user))
	resp, err := http.Post(s.accountURL+"/login", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Tokens token.Set }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("login %s: %d %v", user, resp.StatusCode, err)
	}
	return out.Tokens
}

func call(t *testing.T, method, url, bearer, body string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFor waits until cond holds: for the services, which a loaded machine
// may slow for any time, so only the test's own deadline bounds the wait.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	began := time.Now()
	for !cond() {
		if nearDeadline(t, time.Minute) {
			t.Fatalf("timed out after %v waiting for %s", time.Since(began).Round(time.Millisecond), what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// subject reads the sub claim of a token the test trusts (it just logged in).
func subject(t *testing.T, jwt string) string {
	t.Helper()
	parts := strings.Split(jwt, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct{ Sub string }
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Sub == "" {
		t.Fatalf("no sub in %s", payload)
	}
	return claims.Sub
}

// countingTransport counts the requests per method and path.
type countingTransport struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[req.Method+" "+req.URL.Path]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (c *countingTransport) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// client is the Go client of the services, for user, sending its requests
// through rt (nil: the default transport).
func (s *stack) client(t *testing.T, user string, rt http.RoundTripper) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{
		AccountURL:       s.accountURL,
		ConversationsURL: s.convURL,
		// No timeout of its own: on a loaded machine a request can take
		// any time; a hang is bounded by the test's -timeout.
		HTTPClient:  &http.Client{Transport: rt},
		Credentials: client.Credentials{AccountName: "acme", Username: user, Password: userPassword(user)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLoginThenConversations: log in on the account service, use the id
// token on the conversations service, which fetched the keys over HTTP from
// the account service's JWKS endpoint.
func TestLoginThenConversations(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// The conversations service starts first, while the account service is
	// down: it must come up and become ready once the JWKS is reachable.
	convDone := make(chan *process, 1)
	go func() { convDone <- s.startConversations(t) }()
	waitFor(t, func() bool {
		status, body := get(t, "http://"+s.convOps+"/readyz")
		return status == http.StatusServiceUnavailable && strings.Contains(body, "signing_keys")
	}, "conversations /readyz to be 503 naming signing_keys while the account service is down")
	account := s.startAccount(t)
	conv := <-convDone

	ctx := context.Background()
	alice := s.client(t, "alice", nil)
	if err := alice.Login(ctx); err != nil {
		t.Fatal(err)
	}
	bobRequests := &countingTransport{n: map[string]int{}}
	bob := s.client(t, "bob", bobRequests)
	if err := bob.Login(ctx); err != nil {
		t.Fatal(err)
	}
	bobToken, err := bob.IDToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bobID := subject(t, bobToken) // participants are user ids, not usernames
	for i := range 3 {
		if _, err := alice.CreateConversation(ctx, client.NewConversation{
			Subject: fmt.Sprintf("c%d", i), Participants: []string{bobID},
		}); err != nil {
			t.Fatalf("create: %v", err)
		}
	}
	// Page two at a time, as bob (a participant of all three).
	var subjects []string
	for c, err := range bob.Conversations(ctx, client.ListOptions{Limit: 2}) {
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if !slices.Contains(c.Participants, bobID) {
			t.Fatalf("conversation %s without bob: %v", c.ID, c.Participants)
		}
		subjects = append(subjects, c.Subject)
	}
	if strings.Join(subjects, ",") != "c2,c1,c0" {
		t.Fatalf("paged subjects = %v, want newest first c2,c1,c0", subjects)
	}
	if n := bobRequests.count("GET /v1/conversations"); n != 2 {
		t.Fatalf("%d page requests for 3 conversations with limit=2, want 2", n)
	}

	// The refresh token is no bearer, here either.
	if status, h, _ := call(t, "GET", s.convURL+"/v1/conversations", s.login(t, "alice").RefreshToken, ""); status != 401 || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("refresh token as bearer: %d", status)
	}
	conv.stop(t)
	account.stop(t)
}

// TestNewSigningKeyIsAcceptedWithoutRestart: the account service moves to a
// new key; the conversations service refetches the JWKS on the unknown kid
// and accepts the new tokens, without a restart. A key that was never
// published is refused.
func TestNewSigningKeyIsAcceptedWithoutRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := func(name, alg string) string {
		key, err := token.GenerateKey(alg)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := token.MarshalPrivateJWK(key)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	first, second := keyFile("first.jwk", "RS256"), keyFile("second.jwk", "ES256")
	s := newStack(t, "ACCOUNT_KEY_FILES="+first)
	account := s.startAccount(t)
	conv := s.startConversations(t)

	old := s.login(t, "alice").IDToken
	if status, _, body := call(t, "GET", s.convURL+"/v1/conversations", old, ""); status != 200 {
		t.Fatalf("first key: %d %s", status, body)
	}

	// A token signed by a key that is not in the JWKS.
	forged := tokentest.StrangerOf(t, token.AlgRS256, s.accountURL, []string{"acme-platform"}, token.Subject{UserID: "usr_x", AccountID: "acc_x"})
	if status, _, _ := call(t, "GET", s.convURL+"/v1/conversations", forged.IDToken, ""); status != 401 {
		t.Fatalf("token of an unpublished key: %d, want 401", status)
	}

	// The account service restarts signing with the second key, still
	// publishing the first for the tokens it signed.
	account.stop(t)
	time.Sleep(1100 * time.Millisecond) // past the min refresh interval of the stray-kid refetch
	account = s.startAccount(t, "ACCOUNT_KEY_FILES="+second+","+first)
	fresh := s.login(t, "alice").IDToken
	if status, _, body := call(t, "GET", s.convURL+"/v1/conversations", fresh, ""); status != 200 {
		t.Fatalf("token of the new key: %d %s\nconversations logs:\n%s", status, body, conv.Logs)
	}
	if status, _, _ := call(t, "GET", s.convURL+"/v1/conversations", old, ""); status != 200 {
		t.Fatalf("token of the previous, still published key: %d", status)
	}
	conv.stop(t)
	account.stop(t)
}

// userPassword is the password of an e2e user: one of its own that meets
// the account service's password policy (15 or more characters, not
// containing the username: its letters are separated by dots).
func userPassword(user string) string {
	return "correct-horse-" + strings.Join(strings.Split(user, ""), ".")
}
