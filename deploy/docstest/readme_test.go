package docstest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// root is the repository's root, from deploy/docstest.
const root = "../.."

// TestREADMEEndpointsMatchOpenAPI: the endpoint table of each service's
// section in the README names every operation of its OpenAPI document, and
// nothing else.
func TestREADMEEndpointsMatchOpenAPI(t *testing.T) {
	readme := readFile(t, "README.md")
	for _, svc := range []struct{ name, heading string }{
		{"account", "## The account service"},
		{"conversations", "## The conversations service"},
	} {
		t.Run(svc.name, func(t *testing.T) {
			documented := readmeEndpoints(t, section(t, readme, svc.heading))
			served := openAPIOperations(t, filepath.Join("services", svc.name, "http", "openapi.yaml"))
			for _, op := range served {
				if !slices.Contains(documented, op) {
					t.Errorf("README's %s table lacks %s (in openapi.yaml)", svc.name, op)
				}
			}
			for _, op := range documented {
				if !slices.Contains(served, op) {
					t.Errorf("README's %s table names %s, which openapi.yaml does not have", svc.name, op)
				}
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text of doc from heading up to the next heading of
// the same level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("no section %q", heading)
	}
	rest := doc[i+len(heading)+2:]
	if j := strings.Index(rest, "\n"+strings.SplitN(heading, " ", 2)[0]+" "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// endpointCell is the first cell of an endpoint table's row:
// `METHOD[/METHOD…] /path[?query]`.
var endpointCell = regexp.MustCompile("^\\| `([A-Z]+(?:/[A-Z]+)*) (/[^` ?]*)(?:\\?[^`]*)?` \\|")

// readmeEndpoints returns the operations ("GET /path") of the tables in
// text whose header's first column is "endpoint".
func readmeEndpoints(t *testing.T, text string) []string {
	t.Helper()
	var ops []string
	inTable := false
	for line := range strings.SplitSeq(text, "\n") {
		switch {
		case strings.HasPrefix(line, "| endpoint |"):
			inTable = true
		case !strings.HasPrefix(line, "|"):
			inTable = false
		case inTable && strings.HasPrefix(line, "|---"):
		case inTable:
			m := endpointCell.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("endpoint row %q does not start with `METHOD /path`", line)
				continue
			}
			for method := range strings.SplitSeq(m[1], "/") {
				ops = append(ops, method+" "+m[2])
			}
		}
	}
	if len(ops) == 0 {
		t.Fatal("no endpoint table")
	}
	return ops
}

// openAPIOperations returns the operations ("GET /path") of an OpenAPI
// document.
func openAPIOperations(t *testing.T, path string) []string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, path)), &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var ops []string
	for p, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				ops = append(ops, strings.ToUpper(method)+" "+p)
			}
		}
	}
	if len(ops) == 0 {
		t.Fatalf("%s has no operations", path)
	}
	return ops
}

// TestREADMELayoutMatchesTree: the README's Layout table names every Go
// package directory of the repository (as a row of its own, or as
// `sub/` in the row of a directory above it), every Go file at the root of
// a service (its domain), and nothing that does not exist.
func TestREADMELayoutMatchesTree(t *testing.T) {
	text := section(t, readFile(t, "README.md"), "## Layout")
	rows := map[string]string{} // path → rest of the row
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.SplitN(strings.TrimPrefix(line, "| "), " | ", 2)
		for p := range strings.SplitSeq(cells[0], ", ") {
			rows[strings.TrimSuffix(strings.Trim(p, "`"), "/")] = cells[1]
		}
	}
	if len(rows) == 0 {
		t.Fatal("no Layout table")
	}
	mentioned := func(dir string) bool {
		for p, rest := range rows {
			if dir == p {
				return true
			}
			if rel, ok := strings.CutPrefix(dir, p+"/"); ok && strings.Contains(rest, "`"+rel+"/`") {
				return true
			}
		}
		return false
	}
	for _, top := range []string{"pkg", "services", "clients", "deploy"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := e.Name()
			if e.IsDir() && (name == "node_modules" || name == "vendor" || name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			if e.IsDir() || !strings.HasSuffix(name, ".go") {
				return nil
			}
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			dir := filepath.ToSlash(rel)
			if !mentioned(dir) {
				t.Errorf("README's Layout table does not name %s/", dir)
			}
			if strings.Count(dir, "/") == 1 && strings.HasPrefix(dir, "services/") && !strings.HasSuffix(name, "_test.go") &&
				!strings.Contains(rows[dir], "`"+name+"`") {
				t.Errorf("README's Layout row of %s/ does not name its domain file %s", dir, name)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every path named exists: the rows' paths, and the `sub/` and
	// `file.go` they name below them.
	named := regexp.MustCompile("`([A-Za-z0-9_./-]+(?:/|\\.go))`")
	for p, rest := range rows {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("README's Layout table names %s, which does not exist", p)
		}
		for _, m := range named.FindAllStringSubmatch(rest, -1) {
			if _, err := os.Stat(filepath.Join(root, p, m[1])); err != nil {
				t.Errorf("README's Layout row of %s names %s, which does not exist there", p, m[1])
			}
		}
	}
}
