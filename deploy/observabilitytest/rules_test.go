package observabilitytest

import (
	"regexp"
	"strings"
	"testing"
)

// recordingName is the level:metric:operations convention of recorded
// series.
var recordingName = regexp.MustCompile(`^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$`)

func TestRuleFiles(t *testing.T) {
	files := loadRuleFiles(t)
	groups := map[string]string{} // group name: file; all files load into one Prometheus
	alerts, records := 0, 0
	for _, f := range files {
		for _, g := range f.groups.Groups {
			if other, ok := groups[g.Name]; ok {
				t.Errorf("%s: group %q is also in %s", f.name, g.Name, other)
			}
			groups[g.Name] = f.name
			for _, r := range g.Rules {
				if r.Record != "" {
					records++
					if !recordingName.MatchString(r.Record) {
						t.Errorf("%s: recording rule %s: want a level:metric:operations name", f.name, r.Record)
					}
					continue
				}
				alerts++
				if r.For <= 0 {
					t.Errorf("%s: alert %s has no for: a single evaluation would fire it", f.name, r.Alert)
				}
				if s := r.Labels["severity"]; s != "critical" && s != "warning" {
					t.Errorf("%s: alert %s: severity %q, want critical or warning", f.name, r.Alert, s)
				}
				for _, a := range []string{"summary", "description"} {
					if r.Annotations[a] == "" {
						t.Errorf("%s: alert %s has no %s annotation", f.name, r.Alert, a)
					}
				}
			}
		}
	}
	if alerts == 0 || records == 0 {
		t.Errorf("%d alerting and %d recording rules, want some of each", alerts, records)
	}
	// Every expression parses (rulefmt did) and every recorded series an
	// expression reads is recorded by some rule.
	queries, recorded := ruleQueries(t, files)
	selections(t, queries, recorded)
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: want both", d.UID, d.Title)
	}
	hasVariable := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasVariable = true
		}
	}
	if !hasVariable {
		t.Errorf("no Prometheus data source variable named datasource")
	}
	ids := map[int]bool{}
	targets := 0
	for _, p := range d.allPanels() {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d is taken", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %q has no size (gridPos)", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != dashboardDatasource {
			t.Errorf("panel %q: data source %+v, want uid %s", p.Title, p.Datasource, dashboardDatasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			targets++
			if target.Datasource != nil && target.Datasource.UID != dashboardDatasource {
				t.Errorf("panel %q, target %s: data source %+v, want uid %s", p.Title, target.RefID, target.Datasource, dashboardDatasource)
			}
		}
	}
	// A slow request leads to its trace: the latency panels show the
	// histogram's exemplars, which carry the trace id.
	latency := 0
	for _, p := range d.allPanels() {
		for _, target := range p.Targets {
			if strings.Contains(target.Expr, "http_request_duration_seconds_bucket") && strings.Contains(target.Expr, "histogram_quantile") {
				latency++
				if !target.Exemplar {
					t.Errorf("panel %q, target %s: latency without exemplars (the trace ids)", p.Title, target.RefID)
				}
			}
		}
	}
	if latency == 0 {
		t.Errorf("no latency panel of http_request_duration_seconds")
	}
	queries := dashboardQueries(t, d)
	if len(queries) != targets {
		t.Errorf("%d of %d queries parse", len(queries), targets)
	}
	// The dashboard reads the services' own metrics, not recorded series:
	// it works without the rules loaded.
	selections(t, queries, nil)
}
