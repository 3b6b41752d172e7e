package observabilitytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/acme/platform/deploy/internal/svcproc"
	"github.com/acme/platform/pkg/testkit/mongotest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// TestEveryMetricIsExported runs both service binaries on the test
// database, drives a little traffic through them so that the labelled
// series appear, scrapes their /metrics, and requires every metric that a
// rule or a dashboard panel selects from a job to be exported by that
// service, with every label the selector matches on.
func TestEveryMetricIsExported(t *testing.T) {
	files := loadRuleFiles(t)
	queries, recorded := ruleQueries(t, files)
	queries = append(queries, dashboardQueries(t, loadDashboard(t))...)
	selected := selections(t, queries, recorded)
	if t.Failed() {
		t.FailNow()
	}

	stack := startStack(t)
	stack.traffic(t)
	exported := map[string]map[string]map[string]bool{} // job: metric: label names
	for _, svc := range services {
		exported[svc] = scrape(t, stack.ops[svc])
	}

	for _, s := range selected {
		for _, job := range s.jobs {
			labels, ok := exported[job][s.metric]
			if !ok {
				t.Errorf("%s: %s is not exported by %s", s.where, s.metric, job)
				continue
			}
			for _, l := range s.labels {
				if !labels[l] {
					t.Errorf("%s: %s of %s has no label %q (it has %v)", s.where, s.metric, job, l, sortedKeys(labels))
				}
			}
		}
	}
}

// stack is an account and a conversations service on one database, as the
// deploy/e2e tests run them.
type stack struct {
	accountURL, conversationsURL string
	ops                          map[string]string // job: operations address
}

func startStack(t *testing.T) *stack {
	t.Helper()
	bin, err := svcproc.Binaries(t.Context(), t.TempDir(), services...)
	if err != nil {
		t.Fatal(err)
	}
	addr := func() string {
		a, err := svcproc.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	accountAddr, conversationsAddr := addr(), addr()
	s := &stack{
		accountURL:       "http://" + accountAddr,
		conversationsURL: "http://" + conversationsAddr,
		ops:              map[string]string{"account": addr(), "conversations": addr()},
	}
	uri := mongotest.URI(t)
	accountEnv := []string{
		"ACCOUNT_MONGODB_URI=" + uri, "ACCOUNT_MONGODB_DATABASE=" + mongotest.New(t).Name(),
		"ACCOUNT_HTTP_ADDR=" + accountAddr, "ACCOUNT_OPS_ADDR=" + s.ops["account"],
		"ACCOUNT_ISSUER=" + s.accountURL,
		"ACCOUNT_ARGON2_MEMORY_KIB=1024", "ACCOUNT_ARGON2_ITERATIONS=1",
	}
	conversationsEnv := []string{
		"CONVERSATIONS_MONGODB_URI=" + uri, "CONVERSATIONS_MONGODB_DATABASE=" + mongotest.New(t).Name(),
		"CONVERSATIONS_HTTP_ADDR=" + conversationsAddr, "CONVERSATIONS_OPS_ADDR=" + s.ops["conversations"],
		"CONVERSATIONS_JWKS_URL=" + s.accountURL + "/.well-known/jwks.json",
		"CONVERSATIONS_ISSUER=" + s.accountURL,
	}
	for _, args := range [][]string{
		{"create-account", "acme"},
		{"create-user", "--account", "acme", "--username", "alice"},
	} {
		cmd := exec.CommandContext(t.Context(), filepath.Join(bin, "account"), args...)
		cmd.Env = append(os.Environ(), accountEnv...)
		cmd.Stdin = strings.NewReader("plum-orbit-canvas-ladder\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("account %v: %v\n%s", args, err, out)
		}
	}
	for _, svc := range []struct {
		name string
		env  []string
	}{{"account", accountEnv}, {"conversations", conversationsEnv}} {
		p, err := svcproc.Start(t.Context(), filepath.Join(bin, svc.name), svc.env, s.ops[svc.name], time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := p.Stop(20 * time.Second); err != nil {
				t.Error(err)
			}
		})
	}
	return s
}

// traffic sends a good and a bad login, a token refresh and a list of
// conversations.
func (s *stack) traffic(t *testing.T) {
	t.Helper()
	login := func(pw string) (int, []byte) {
		return post(t, s.accountURL+"/login", fmt.Sprintf(`{"accountName":"acme","username":"alice","password":%q}`, pw))
	}
	if status, body := login("wrong-password"); status != http.StatusUnauthorized {
		t.Fatalf("login with a wrong password: %d %s", status, body)
	}
	status, body := login("plum-orbit-canvas-ladder")
	if status != http.StatusOK {
		t.Fatalf("login: %d %s", status, body)
	}
	var tokens struct {
		Tokens struct {
			AccessToken  string `json:"access_token"`
			RefreshToken string `json:"refresh_token"`
		} `json:"tokens"`
	}
	if err := json.Unmarshal(body, &tokens); err != nil {
		t.Fatal(err)
	}
	if status, body := post(t, s.accountURL+"/token/refresh", fmt.Sprintf(`{"refresh_token":%q}`, tokens.Tokens.RefreshToken)); status != http.StatusOK {
		t.Fatalf("refresh: %d %s", status, body)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.conversationsURL+"/v1/conversations", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokens.Tokens.AccessToken)
	if status, body := do(t, req); status != http.StatusOK {
		t.Fatalf("list conversations: %d %s", status, body)
	}
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// scrape reads the service's /metrics and returns the label names of each
// series name it exports: a histogram's _bucket (with le), _count and
// _sum, a summary's quantiles, _count and _sum, as PromQL sees them.
func scrape(t *testing.T, opsAddr string) map[string]map[string]bool {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+opsAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	status, body := do(t, req)
	if status != http.StatusOK {
		t.Fatalf("GET %s/metrics: %d", opsAddr, status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("%s/metrics: %v", opsAddr, err)
	}
	out := map[string]map[string]bool{}
	add := func(name string, labels []*dto.LabelPair, extra ...string) {
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		for _, l := range labels {
			out[name][l.GetName()] = true
		}
		for _, l := range extra {
			out[name][l] = true
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				add(name+"_bucket", m.GetLabel(), model.BucketLabel)
				add(name+"_count", m.GetLabel())
				add(name+"_sum", m.GetLabel())
			case dto.MetricType_SUMMARY:
				add(name, m.GetLabel(), model.QuantileLabel)
				add(name+"_count", m.GetLabel())
				add(name+"_sum", m.GetLabel())
			default:
				add(name, m.GetLabel())
			}
		}
	}
	return out
}
