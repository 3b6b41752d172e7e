package clientstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/deploy/internal/npmcache"
	"github.com/acme/platform/deploy/internal/svcproc"
	"github.com/acme/platform/pkg/testkit/mongotest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// suite is one client library's own test suite, run in its folder against
// the services. Adding a language is one entry in suites.
type suite struct {
	// name identifies the suite in SKIP_CLIENTS and names its account.
	name string
	// dir is the library's folder, relative to the repository root.
	dir string
	// tools are the programs the suite needs; a missing one fails the run
	// with the package that provides it.
	tools []tool
	// install, when set, installs the locked dependencies and builds, in
	// dir, running its commands with run.
	install func(ctx context.Context, dir string, run npmcache.Run) error
	// prepare runs before the suite, in dir, one command after another
	// (checking the toolchain's version).
	prepare [][]string
	// files is the glob, relative to dir, of the suite's test files. Each
	// file runs in a process of its own against an account of its own,
	// side by side with the suite's other files: most of a suite's time is
	// spent waiting (token lifetimes, a browser, a venv), and no file sees
	// another's conversations in its listings.
	files string
	// run is the command that runs one test file (its path relative to
	// dir), in dir; the file passes when it exits 0.
	run func(file string) []string
	// inProcess, when set, is the suite itself, run in this test process
	// on the services given, seeding its own accounts (the Go client's: no
	// toolchain beyond the one running this test).
	inProcess func(t *testing.T, st *stack)
}

// tool is a program a suite needs and where it comes from.
type tool struct {
	program string
	// install says how to get it, e.g. "apt-get install nodejs".
	install string
}

var suites = []suite{
	{
		name:      "go",
		dir:       "clients/go",
		inProcess: runGoSuite,
	},
	{
		name: "js",
		dir:  "clients/js",
		tools: []tool{
			{"node", "apt-get install nodejs (Node 20 or later)"},
			{"npm", "apt-get install npm"},
			{"chromium", "apt-get install chromium"},
		},
		// npm ci and npm run build, the README's first install line, from
		// the copies of an earlier run when nothing they read has changed.
		install: func(ctx context.Context, dir string, run npmcache.Run) error {
			return npmcache.InstallAndBuild(ctx, dir, "src", "dist", run)
		},
		files: "test/*.test.js",
		run: func(file string) []string {
			return []string{"node", "--test", "--test-reporter=spec", file}
		},
	},
	{
		name: "python",
		dir:  "clients/python",
		tools: []tool{
			{"python3", "apt-get install python3 (Python 3.9 or later)"},
			// tests/test_readme.py type-checks the README's snippets.
			{"mypy", "apt-get install mypy"},
		},
		prepare: [][]string{
			{"python3", "-c", `import sys; sys.exit(sys.version_info < (3, 9) and "python3 is " + sys.version.split()[0] + ": the client needs Python 3.9 or later")`},
			// The README's install line, which the suite runs
			// (tests/test_readme.py), makes a venv with pip.
			{"python3", "-c", `import sys, importlib.util; sys.exit(importlib.util.find_spec("ensurepip") is None and "python3 has no venv with pip: apt-get install python3-venv")`},
		},
		files: "tests/test_*.py",
		// The package from its source folder: the suite needs no install.
		run: func(file string) []string {
			module := strings.TrimSuffix(filepath.Base(file), ".py")
			return []string{"env", "PYTHONPATH=src:tests", "python3", "-m", "unittest", "-v", module}
		},
	},
	{
		name: "php",
		dir:  "clients/php",
		tools: []tool{
			{"php", "apt-get install php-cli php-curl (PHP 8.1 or later)"},
			{"phpunit", "apt-get install phpunit"},
			// The README's install lines, which the suite runs (tests/ReadmeTest.php).
			{"composer", "apt-get install composer"},
		},
		prepare: [][]string{
			{"php", "-r", `if (PHP_VERSION_ID < 80100 || !extension_loaded("curl")) { fwrite(STDERR, "the client needs PHP 8.1 or later with curl: apt-get install php-cli php-curl\n"); exit(1); }`},
		},
		files: "tests/*Test.php",
		// phpunit.xml.dist bootstraps a PSR-4 autoloader: no composer install.
		run: func(file string) []string { return []string{"phpunit", "--testdox", file} },
	},
}

// skipEnv names the suites to leave out, comma-separated.
const skipEnv = "SKIP_CLIENTS"

// tokenTTL is the lifetime of the id and access tokens the services issue
// to the suites: short, so that every suite sees its tokens renewed.
const tokenTTL = 4 * time.Second

// suiteDeadlineMargin is how long before the test's own deadline (go
// test -timeout) a suite still running is stopped: a fixed bound per
// suite (it was 5 minutes) is what npm ci and a build on a loaded machine
// exceeded; stopping the suite first still fails with its output.
const suiteDeadlineMargin = 30 * time.Second

func TestClients(t *testing.T) {
	skipped, err := skippedSuites(os.Getenv(skipEnv))
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// Every toolchain is checked before anything starts: a machine that
	// lacks several learns all of them at once.
	var missing []string
	for _, s := range suites {
		if skipped[s.name] {
			continue
		}
		for _, tl := range s.tools {
			if _, err := exec.LookPath(tl.program); err != nil {
				missing = append(missing, fmt.Sprintf("%s suite: %s not found: %s (or leave the client out with %s=%s)", s.name, tl.program, tl.install, skipEnv, s.name))
			}
		}
	}
	if len(missing) > 0 {
		t.Fatalf("missing toolchains:\n%s", strings.Join(missing, "\n"))
	}

	browserOrigin := "http://" + svcproc.FreeAddrForTest(t)
	// The suites, and the files of each, mostly wait (token lifetimes, a
	// browser, a venv): side by side they take the time of the longest.
	// They run as goroutines rather than parallel subtests, which go test
	// would run only GOMAXPROCS at a time (-parallel).
	//
	// Each suite has services of its own on databases of its own: the
	// embedded store reads a whole collection for every query but one by
	// id, so suites sharing a database made each other's queries slower
	// as they filled it (a process pair costs a fraction of a CPU-second).
	var suitesDone sync.WaitGroup
	for _, s := range suites {
		suitesDone.Go(func() {
			t.Run(s.name, func(t *testing.T) {
				if skipped[s.name] {
					t.Skipf("left out by %s", skipEnv)
				}
				if s.inProcess != nil {
					// The Go suite counts the logins and renewals of its
					// client, so its tokens must not expire under a slow
					// test: a lifetime no test outlasts (its wire sets the
					// expires_in a test needs).
					s.inProcess(t, startStackWithTTL(t, browserOrigin, time.Hour))
					return
				}
				st := startStack(t, browserOrigin)
				faults, err := StartFaultProxy(st.accountURL, st.convURL)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = faults.Close() })
				dir := filepath.Join(root, s.dir)
				files, err := filepath.Glob(filepath.Join(dir, s.files))
				if err != nil || len(files) == 0 {
					t.Fatalf("%s suite: no test files match %s in %s (%v)", s.name, s.files, s.dir, err)
				}
				ctx, cancel := suiteContext(t)
				defer cancel()
				if s.install != nil {
					run := func(ctx context.Context, dir string, args ...string) error {
						return runLogged(t, ctx, dir, args, nil)
					}
					if err := s.install(ctx, dir, run); err != nil {
						t.Fatal(err)
					}
				}
				for _, args := range s.prepare {
					runCommand(t, ctx, dir, args, nil)
				}
				var filesDone sync.WaitGroup
				for _, file := range files {
					rel, _ := filepath.Rel(dir, file)
					filesDone.Go(func() {
						t.Run(rel, func(t *testing.T) {
							env := append(st.seed(t, accountName(s.name, rel)),
								"ACME_TEST_BROWSER_ORIGIN="+browserOrigin, "ACME_TEST_FAULT_PROXY_URL="+faults.URL)
							ctx, cancel := suiteContext(t)
							defer cancel()
							runCommand(t, ctx, dir, s.run(rel), env)
						})
					})
				}
				filesDone.Wait()
			})
		})
	}
	suitesDone.Wait()
}

// accountName is the account of one test file of a suite: the suite's
// name and the file's, e.g. "python-test-session" for tests/test_session.py.
func accountName(suite, file string) string {
	base := strings.ToLower(filepath.Base(file))
	base = base[:strings.IndexByte(base+".", '.')]
	return suite + "-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, base)
}

// skippedSuites parses SKIP_CLIENTS; an unknown name is an error.
func skippedSuites(v string) (map[string]bool, error) {
	skipped := map[string]bool{}
	for name := range strings.SplitSeq(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.ContainsFunc(suites, func(s suite) bool { return s.name == name }) {
			var names []string
			for _, s := range suites {
				names = append(names, s.name)
			}
			return nil, fmt.Errorf("%s: unknown client %q (known: %s)", skipEnv, name, strings.Join(names, ", "))
		}
		skipped[name] = true
	}
	return skipped, nil
}

// suiteContext ends suiteDeadlineMargin before the test's own deadline, so
// that a command still running then fails the test with its output.
func suiteContext(t *testing.T) (context.Context, context.CancelFunc) {
	if d, ok := t.Deadline(); ok {
		return context.WithDeadline(t.Context(), d.Add(-suiteDeadlineMargin))
	}
	return context.WithCancel(t.Context())
}

// runCommand runs args in dir with env added, logs its output and fails
// the test when it does not exit 0.
func runCommand(t *testing.T, ctx context.Context, dir string, args, env []string) {
	t.Helper()
	if err := runLogged(t, ctx, dir, args, env); err != nil {
		t.Fatal(err)
	}
}

// runLogged runs a command in dir with env added and logs its output.
func runLogged(t *testing.T, ctx context.Context, dir string, args, env []string) error {
	t.Helper()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s (in %s, %s):\n%s", strings.Join(args, " "), dir, time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// stack is both services on a fresh database.
type stack struct {
	pair                   *svcproc.Pair
	tokenTTL               time.Duration
	accountURL, convURL    string
	definitionName, defTyp string
}

// startStack starts both services on fresh databases, with tokens of
// tokenTTL and CORS for browserOrigin; the test's cleanup stops them.
func startStack(t *testing.T, browserOrigin string) *stack {
	t.Helper()
	return startStackWithTTL(t, browserOrigin, tokenTTL)
}

// startStackWithTTL is startStack with tokens of ttl.
func startStackWithTTL(t *testing.T, browserOrigin string, ttl time.Duration) *stack {
	t.Helper()
	bin, err := svcproc.Binaries(t.Context(), t.TempDir(), "account", "conversations")
	if err != nil {
		t.Fatal(err)
	}
	// Each request's database budget: the four suites share one embedded
	// store, which runs one command at a time, beside the rest of make
	// test; under that load a login's commands together took over the 3 s
	// default, which no database a deployment runs would take. What a
	// spent budget answers is TestFrozenDatabase's (deploy/e2e).
	const dbTimeout = "30s"
	accountEnv := []string{
		"ACCOUNT_TOKEN_TTL=" + ttl.String(),
		"ACCOUNT_CORS_ORIGINS=" + browserOrigin,
		"ACCOUNT_MONGODB_TIMEOUT=" + dbTimeout,
	}
	convEnv := []string{
		"CONVERSATIONS_CORS_ORIGINS=" + browserOrigin,
		"CONVERSATIONS_MONGODB_TIMEOUT=" + dbTimeout,
		// One replica: its own changes wake its relay and streams at once;
		// the poll, which looks for other replicas' changes, would only
		// load the shared embedded store.
		"CONVERSATIONS_EVENTS_POLL_INTERVAL=5s",
		// Webhooks to the suites' receivers on loopback, plain http;
		// new events and due retries looked for every 500 ms (a test
		// delivery is sent at once): each look is a query of the store.
		"CONVERSATIONS_WEBHOOK_SECRET_KEY=" + base64.StdEncoding.EncodeToString([]byte(randomSecret(t)[3:35])),
		"CONVERSATIONS_WEBHOOK_ALLOW_HTTP=true",
		"CONVERSATIONS_WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8,::1/128",
		"CONVERSATIONS_WEBHOOK_POLL_INTERVAL=500ms",
		"CONVERSATIONS_WEBHOOK_RETRY_SCHEDULE=200ms,400ms",
	}
	s := &stack{tokenTTL: ttl, definitionName: "CRM", defTyp: "salesforce"}
	s.pair = svcproc.StartPairForTest(t, bin, mongotest.URI(t), mongotest.New(t).Name(), mongotest.New(t).Name(), accountEnv, convEnv)
	s.accountURL, s.convURL = s.pair.AccountURL, s.pair.ConversationsURL
	return s
}

// admin runs a subcommand of the account binary and returns its output.
func (s *stack) admin(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	return s.pair.Account(t, stdin, args...)
}

var (
	clientIDPattern     = regexp.MustCompile(`(?m)^client_id: (\S+)$`)
	clientSecretPattern = regexp.MustCompile(`(?m)^client_secret: (cs_\S+)$`)
)

// allScopes are the scopes of a seeding service client: every one.
const allScopes = "definitions:read,definitions:write,conversations:read,conversations:write,users:read,users:write,webhooks:manage"

// seed creates the account of suite name with its users, its service
// client and its definition, and returns the suite's environment (see the
// package documentation).
func (s *stack) seed(t *testing.T, name string) []string {
	t.Helper()
	acc := s.newAccount(t, name)
	acc.post(t, "/definitions", fmt.Sprintf(`{"name":%q,"type":%q,"config":{"instance":"https://example.my.salesforce.com"}}`, s.definitionName, s.defTyp))
	env := []string{
		"ACME_TEST_ACCOUNT_URL=" + s.accountURL,
		"ACME_TEST_CONVERSATIONS_URL=" + s.convURL,
		"ACME_TEST_ACCOUNT_NAME=" + name,
		"ACME_TEST_TOKEN_TTL=" + strconv.Itoa(int(s.tokenTTL/time.Second)),
		"ACME_TEST_DEFINITION_NAME=" + s.definitionName,
		"ACME_TEST_DEFINITION_TYPE=" + s.defTyp,
	}
	for _, u := range []struct{ prefix, username string }{
		{"ACME_TEST_", "alice"}, {"ACME_TEST_OTHER_", "bob"}, {"ACME_TEST_LOCKOUT_", "mallory"},
	} {
		pw := randomSecret(t)
		id := acc.createUser(t, u.username, pw)
		env = append(env, u.prefix+"USERNAME="+u.username, u.prefix+"PASSWORD="+pw, u.prefix+"USER_ID="+id)
	}
	return append(env, "ACME_TEST_CLIENT_ID="+acc.clientID, "ACME_TEST_CLIENT_SECRET="+acc.clientSecret)
}

// seededAccount is an account the tests made, with a service client of
// every scope through which they create its users and definitions: the API
// a backend would use. (Only accounts and service clients need the
// operator's subcommands; a process of the account binary per user would
// cost more than the requests.)
type seededAccount struct {
	s                      *stack
	name                   string
	clientID, clientSecret string
}

// newAccount creates the account name and its seeding client.
func (s *stack) newAccount(t *testing.T, name string) *seededAccount {
	t.Helper()
	s.admin(t, "", "create-account", name)
	out := s.admin(t, "", "create-client", "--account", name, "--name", name+"-tests", "--scopes", allScopes)
	id, secret := clientIDPattern.FindStringSubmatch(out), clientSecretPattern.FindStringSubmatch(out)
	if id == nil || secret == nil {
		t.Fatalf("create-client printed no client_id and client_secret (%d bytes of output)", len(out))
	}
	return &seededAccount{s: s, name: name, clientID: id[1], clientSecret: secret[1]}
}

// createUser creates a user of the account and returns its id.
func (a *seededAccount) createUser(t *testing.T, username, password string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"username": username, "password": password})
	var user struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(a.post(t, "/users", string(body)), &user); err != nil || user.ID == "" {
		t.Fatalf("POST /users answered no user id: %v", err)
	}
	return user.ID
}

// post sends body to path of the account service as the seeding client,
// with a token of its own (the stack's tokens may live a few seconds),
// and returns the answer; anything but a 201 fails the test.
func (a *seededAccount) post(t *testing.T, path, body string) []byte {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {strings.ReplaceAll(allScopes, ",", " ")}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, a.s.accountURL+"/oauth2/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(a.clientID), url.QueryEscape(a.clientSecret))
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(send(t, req, http.StatusOK), &tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("POST /oauth2/token answered no access token: %v", err)
	}
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, a.s.accountURL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	return send(t, req, http.StatusCreated)
}

// send sends req and returns the body of its answer, failing the test
// unless the status is want.
func send(t *testing.T, req *http.Request, want int) []byte {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s (%v), want %d", req.Method, req.URL.Path, resp.StatusCode, b, err, want)
	}
	return b
}

// randomSecret is a password of 128 random bits.
func randomSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "pw-" + hex.EncodeToString(b)
}
