package svcproc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ReadyWait is how long the tests and the bench wait for a started
// service to be ready: a process that exits fails at once, and one that a
// loaded machine starts slowly is waited for; only a hang reaches it.
const ReadyWait = 2 * time.Minute

// StartForTest runs a service binary until the test ends, then stops it
// with SIGTERM and requires a clean exit. When the test failed, it shows
// what the service logged above info level (the causes of 5xx answers).
// It waits for readiness and the stop as long as a loaded machine takes,
// within generous bounds that only a hang reaches.
func StartForTest(t testing.TB, bin string, env []string, opsAddr string) *Process {
	t.Helper()
	p, err := Start(context.Background(), bin, env, opsAddr, ReadyWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(20 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			var lines []string
			for line := range strings.Lines(p.Logs.String()) {
				if !strings.Contains(line, `"level":"INFO"`) && !strings.Contains(line, `"level":"DEBUG"`) {
					lines = append(lines, line)
				}
			}
			t.Logf("%s logged:\n%s", filepath.Base(bin), strings.Join(lines, ""))
		}
	})
	return p
}

// FreeAddrForTest is FreeAddr that fails the test on error.
func FreeAddrForTest(t testing.TB) string {
	t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Pair is an account and a conversations service that a test started
// (StartPairForTest).
type Pair struct {
	// Bin is the folder of the service binaries.
	Bin                          string
	AccountURL, ConversationsURL string
	// AccountEnv is the account service's environment, which its
	// subcommands (Account) need too.
	AccountEnv []string
}

// StartPairForTest starts the binaries in bin until the test ends
// (StartForTest): the account service on database accountDB and the
// conversations service on conversationsDB of the MongoDB at uri, each on
// free loopback addresses. The account service issues tokens as its own
// URL, with cheap password hashes (the hashing parameters are not what a
// test of the pair is about); the conversations service trusts it, through
// its JWKS. accountEnv and convEnv add to that configuration.
func StartPairForTest(t testing.TB, bin, uri, accountDB, conversationsDB string, accountEnv, convEnv []string) *Pair {
	t.Helper()
	accAddr, convAddr, accOps, convOps := FreeAddrForTest(t), FreeAddrForTest(t), FreeAddrForTest(t), FreeAddrForTest(t)
	p := &Pair{Bin: bin, AccountURL: "http://" + accAddr, ConversationsURL: "http://" + convAddr}
	p.AccountEnv = append([]string{
		"ACCOUNT_MONGODB_URI=" + uri, "ACCOUNT_MONGODB_DATABASE=" + accountDB,
		"ACCOUNT_HTTP_ADDR=" + accAddr, "ACCOUNT_OPS_ADDR=" + accOps,
		"ACCOUNT_ISSUER=" + p.AccountURL,
		"ACCOUNT_ARGON2_MEMORY_KIB=1024", "ACCOUNT_ARGON2_ITERATIONS=1",
	}, accountEnv...)
	convEnv = append([]string{
		"CONVERSATIONS_MONGODB_URI=" + uri, "CONVERSATIONS_MONGODB_DATABASE=" + conversationsDB,
		"CONVERSATIONS_HTTP_ADDR=" + convAddr, "CONVERSATIONS_OPS_ADDR=" + convOps,
		"CONVERSATIONS_JWKS_URL=" + p.AccountURL + "/.well-known/jwks.json",
		"CONVERSATIONS_ISSUER=" + p.AccountURL,
	}, convEnv...)
	StartForTest(t, filepath.Join(bin, "account"), p.AccountEnv, accOps)
	StartForTest(t, filepath.Join(bin, "conversations"), convEnv, convOps)
	return p
}

// Account runs a subcommand of the pair's account binary, with its
// environment and stdin, and returns what it printed; a failure fails the
// test.
func (p *Pair) Account(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(p.Bin, "account"), args...)
	cmd.Env = append(os.Environ(), p.AccountEnv...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("account %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
