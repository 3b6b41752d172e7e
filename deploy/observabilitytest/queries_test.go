package observabilitytest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// observabilityDir holds the rule files (*.yaml) and the dashboard.
const observabilityDir = "../observability"

// services are the job labels the rules and the dashboard select, each
// the name of a service binary.
var services = []string{"account", "conversations"}

// query is one PromQL expression of a rule or of a dashboard panel.
type query struct {
	where string // for messages: file and rule or panel
	expr  parser.Expr
}

// ruleFile is one rule file as Prometheus loads it.
type ruleFile struct {
	name   string
	groups *rulefmt.RuleGroups
}

var promql = parser.NewParser(parser.Options{})

// loadRuleFiles parses every *.yaml of observabilityDir with Prometheus'
// rule parser, which also parses each expression and the templates of the
// annotations; any error fails the test.
func loadRuleFiles(t *testing.T) []ruleFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(observabilityDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no rule files in %s", observabilityDir)
	}
	var files []ruleFile
	for _, p := range paths {
		groups, errs := rulefmt.ParseFile(p, false, model.LegacyValidation, promql, slog.New(slog.DiscardHandler))
		for _, err := range errs {
			t.Error(err)
		}
		if len(errs) == 0 {
			files = append(files, ruleFile{name: filepath.Base(p), groups: groups})
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return files
}

// ruleQueries returns the expression of every rule and the names the
// recording rules record.
func ruleQueries(t *testing.T, files []ruleFile) (queries []query, recorded map[string]bool) {
	t.Helper()
	recorded = map[string]bool{}
	for _, f := range files {
		for _, g := range f.groups.Groups {
			for _, r := range g.Rules {
				name := "alert " + r.Alert
				if r.Record != "" {
					name = "record " + r.Record
					recorded[r.Record] = true
				}
				expr, err := promql.ParseExpr(r.Expr)
				if err != nil {
					t.Errorf("%s: %s: %v", f.name, name, err)
					continue
				}
				queries = append(queries, query{where: f.name + ": " + name, expr: expr})
			}
		}
	}
	return queries, recorded
}

// dashboard is what the tests read of a Grafana dashboard.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string      `json:"refId"`
		Exemplar   bool        `json:"exemplar"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// dashboardDatasource is how every panel names its data source: the
// dashboard's variable, so that the dashboard imports into any Grafana.
const dashboardDatasource = "${datasource}"

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(observabilityDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return d
}

// allPanels flattens the rows.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaIntervals are the interval variables Grafana fills in itself,
// replaced by a duration so that the expression parses as PromQL.
var grafanaIntervals = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}`)

// dashboardQueries parses the expression of every panel target.
func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	var queries []query
	for _, p := range d.allPanels() {
		for _, target := range p.Targets {
			where := fmt.Sprintf("dashboard.json: panel %q, target %s", p.Title, target.RefID)
			text := grafanaIntervals.ReplaceAllString(target.Expr, "5m")
			if strings.Contains(text, "$") {
				t.Errorf("%s: a variable the dashboard does not define: %s", where, target.Expr)
				continue
			}
			expr, err := promql.ParseExpr(text)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			queries = append(queries, query{where: where, expr: expr})
		}
	}
	return queries
}

// selection is a metric some query selects, with the jobs it selects it
// from and the labels it matches on.
type selection struct {
	where  string
	metric string
	jobs   []string
	labels []string // matched on, but job and instance, which Prometheus adds
}

// selections lists every vector selector of queries (range selectors
// included) but those of recorded series, which the rules define. A
// selector must name its metric and select by job, so that it can match
// no other application's series of the same name.
func selections(t *testing.T, queries []query, recorded map[string]bool) []selection {
	t.Helper()
	var out []selection
	for _, q := range queries {
		parser.Inspect(q.expr, func(node parser.Node, _ []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			if vs.Name == "" {
				t.Errorf("%s: %s names no metric", q.where, vs)
				return nil
			}
			if strings.Contains(vs.Name, ":") {
				if !recorded[vs.Name] {
					t.Errorf("%s: %s is recorded by no recording rule", q.where, vs.Name)
				}
				return nil
			}
			s := selection{where: q.where, metric: vs.Name}
			jobMatched := false
			for _, m := range vs.LabelMatchers {
				switch m.Name {
				case model.MetricNameLabel, "instance":
				case "job":
					jobMatched = true
					for _, svc := range services {
						if m.Matches(svc) && !sliceHas(s.jobs, svc) {
							s.jobs = append(s.jobs, svc)
						}
					}
				default:
					s.labels = append(s.labels, m.Name)
				}
			}
			switch {
			case !jobMatched:
				t.Errorf("%s: %s selects no job; every selector names the service (job) it reads", q.where, vs)
			case len(s.jobs) == 0:
				t.Errorf("%s: %s selects neither of the jobs %v", q.where, vs, services)
			default:
				out = append(out, s)
			}
			return nil
		})
	}
	return out
}

func sliceHas(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
