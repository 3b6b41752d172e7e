package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acme/platform/deploy/internal/svcproc"
)

// frozenTimeout is the services' MONGODB_TIMEOUT in TestFrozenDatabase:
// short, so that each round of requests is short.
const frozenTimeout = 2 * time.Second

// operatorFreeze is how long TestFrozenDatabase keeps the database frozen
// at least: as long as the freeze in which an operator saw requests wait
// throughout.
const operatorFreeze = 15 * time.Second

// TestFrozenDatabase: the database process stops answering (SIGSTOP: its
// connections stay open, nothing is refused or reset) under an account
// service and three conversations replicas. Every request that needs it,
// on every process (a listing, a post, a login, a definitions listing), is
// answered with the documented 503 service_unavailable with Retry-After,
// and not only once the driver's monitor has given the server up: the
// first round is sent at once. /readyz turns 503 on every process and
// always answers. After SIGCONT everything recovers without a restart.
// How long the answers took is logged, not asserted (a loaded machine may
// add any time to them); docs/decisions.md has the figures.
func TestFrozenDatabase(t *testing.T) {
	t.Parallel()
	dir, addr := t.TempDir(), svcproc.FreeAddrForTest(t)
	db := startEmbeddedDB(t, dir, addr)
	s := stackOn(t, db.URI(), "account", "conversations", "ACCOUNT_MONGODB_TIMEOUT="+frozenTimeout.String())
	s.convEnv = append(s.convEnv, "CONVERSATIONS_MONGODB_TIMEOUT="+frozenTimeout.String())
	provisionUsers(t, s.bin, s.accountEnv, "alice")
	account := s.startAccount(t)
	procs := map[string]*process{"account": account}
	opsOf := map[string]string{"account": s.accountOps}
	replicas := []string{s.convURL}
	procs["conversations 0"], opsOf["conversations 0"] = s.startConversations(t), s.convOps
	for i := 1; i < 3; i++ {
		apiAddr, ops := svcproc.FreeAddrForTest(t), svcproc.FreeAddrForTest(t)
		env := append(append([]string{}, s.convEnv...), "CONVERSATIONS_HTTP_ADDR="+apiAddr, "CONVERSATIONS_OPS_ADDR="+ops)
		name := fmt.Sprintf("conversations %d", i)
		procs[name], opsOf[name] = start(t, filepath.Join(s.bin, "conversations"), env, ops), ops
		replicas = append(replicas, "http://"+apiAddr)
	}
	c := &http.Client{Timeout: faultRequestTimeout}
	bearer := s.login(t, "alice").IDToken
	created := timedRequest(c, "create conversation", "POST", s.convURL+"/v1/conversations", bearer, `{"subject":"frozen"}`)
	if created.status != http.StatusCreated {
		t.Fatalf("before the freeze: %v", created)
	}
	var conv struct{ ID string }
	_ = json.Unmarshal(created.body, &conv)

	loginBody := `{"username":"alice","password":"` + userPassword("alice") + `","accountName":"acme"}`
	type route struct{ name, method, url, bearer, body string }
	routes := []route{
		{"account POST /login", "POST", s.accountURL + "/login", "", loginBody},
		{"account GET /definitions", "GET", s.accountURL + "/definitions", bearer, ""},
	}
	for i, base := range replicas {
		routes = append(routes,
			route{fmt.Sprintf("conversations %d GET /v1/conversations", i), "GET", base + "/v1/conversations", bearer, ""},
			route{fmt.Sprintf("conversations %d POST messages", i), "POST", base + "/v1/conversations/" + conv.ID + "/messages", bearer, `{"body":"while frozen"}`},
		)
	}
	sendAll := func() []httpOutcome {
		out := make([]httpOutcome, len(routes))
		var wg sync.WaitGroup
		for i, r := range routes {
			wg.Go(func() { out[i] = timedRequest(c, r.name, r.method, r.url, r.bearer, r.body) })
		}
		wg.Wait()
		return out
	}
	readyz := func() map[string]httpOutcome {
		out := map[string]httpOutcome{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for name, ops := range opsOf {
			wg.Go(func() {
				x := timedRequest(c, name+" /readyz", "GET", "http://"+ops+"/readyz", "", "")
				mu.Lock()
				out[name] = x
				mu.Unlock()
			})
		}
		wg.Wait()
		return out
	}
	// What each process holds: background work must not pile up
	// goroutines or connections (file descriptors) while frozen.
	resources := func() string {
		var parts []string
		for _, name := range []string{"account", "conversations 0", "conversations 1", "conversations 2"} {
			metrics := "http://" + opsOf[name] + "/metrics"
			parts = append(parts, fmt.Sprintf("%s %d goroutines %d fds", name,
				metricGauge(c, metrics, "go_goroutines"), metricGauge(c, metrics, "process_open_fds")))
		}
		return strings.Join(parts, ", ")
	}
	for _, x := range sendAll() {
		if x.err != nil || x.status >= 300 {
			t.Fatalf("before the freeze: %v", x)
		}
	}
	t.Logf("before the freeze: %s", resources())

	// Frozen until the end of the test at the latest: a stopped server
	// cannot stop.
	var thawOnce sync.Once
	thaw := func() {
		thawOnce.Do(func() {
			if err := syscall.Kill(db.PID(), syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT: %v", err)
			}
		})
	}
	t.Cleanup(thaw)
	if err := syscall.Kill(db.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Every thread of the server stopped: the signal is delivered to each
	// as it is next scheduled.
	waitFor(t, func() bool { return processStopped(t, db.PID()) }, "the database's threads to stop")
	frozen := time.Now()
	t.Logf("database stopped (SIGSTOP)")

	check503 := func(round string, xs []httpOutcome) {
		t.Helper()
		for _, x := range xs {
			if why := whyUnavailable(x); why != "" {
				t.Errorf("%s (%s): %v", round, why, x)
			} else {
				t.Logf("%s: %s answered 503 after %v", round, x.name, x.end.Sub(x.start).Round(time.Millisecond))
			}
		}
	}
	// At once: the monitors of the drivers have not noticed anything yet.
	check503("frozen, at once", sendAll())

	// Readiness fails everywhere, each probe answering.
	waitFor(t, func() bool {
		notReady := 0
		for name, x := range readyz() {
			if x.err != nil {
				t.Fatalf("/readyz of %s while frozen: %v", name, x)
			}
			if x.status == http.StatusServiceUnavailable && strings.Contains(string(x.body), "mongodb") {
				notReady++
			}
		}
		return notReady == len(opsOf)
	}, "/readyz 503 on every process while frozen")
	t.Logf("every /readyz 503 %v after the freeze", time.Since(frozen).Round(time.Millisecond))

	// And again, once every process knows, until the database has been
	// frozen for the 15 s an operator saw requests hang (the drivers'
	// monitors give the server up meanwhile).
	for round := 1; round == 1 || time.Since(frozen) < operatorFreeze; round++ {
		check503(fmt.Sprintf("frozen, not ready, round %d", round), sendAll())
		t.Logf("frozen for %v: %s", time.Since(frozen).Round(time.Millisecond), resources())
	}
	for name, p := range procs {
		assertRunning(t, name, p)
	}
	if t.Failed() {
		t.FailNow()
	}

	thaw()
	thawed := time.Now()
	t.Logf("database resumed (SIGCONT) after %v frozen", thawed.Sub(frozen).Round(time.Millisecond))
	waitFor(t, func() bool {
		for _, x := range readyz() {
			if x.err != nil || x.status != http.StatusOK {
				return false
			}
		}
		for _, x := range sendAll() {
			if x.err != nil || x.status >= 300 {
				return false
			}
		}
		return true
	}, "every /readyz 200 and every request answered after SIGCONT")
	t.Logf("recovered %v after SIGCONT: %s", time.Since(thawed).Round(time.Millisecond), resources())
}

// whyUnavailable reports why x is not the documented 503 of an unreachable
// database (problem+json, code service_unavailable, Retry-After), or "".
func whyUnavailable(x httpOutcome) string {
	if why := why503(x); why != "" {
		return why
	}
	var p struct{ Code string }
	if err := json.Unmarshal(x.body, &p); err != nil || p.Code != "service_unavailable" {
		return "not service_unavailable"
	}
	return ""
}

// metricGauge reads the value of an unlabelled gauge from a Prometheus
// text exposition at url; -1 when it cannot.
func metricGauge(c *http.Client, url, name string) int {
	ctx, cancel := context.WithTimeout(context.Background(), faultRequestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return int(f)
			}
		}
	}
	return -1
}

// processStopped reports whether every thread of process pid is stopped
// (state T in /proc/<pid>/task/*/stat).
func processStopped(t *testing.T, pid int) bool {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of process %d: %v (the test needs Linux's /proc)", pid, err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
