package docstest

import (
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
