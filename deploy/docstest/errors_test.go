package docstest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// modulePrefix is the import path of the repository's root.
const modulePrefix = "github.com/acme/platform/"

// sharedPackages are the shared packages whose code answers requests of
// every service: their functions may emit a code in either service.
// pkg/problem is not among them: its constructors emit their codes only in
// a service that calls them.
var sharedPackages = []string{"pkg/web", "pkg/token", "pkg/servicecmd"}

// TestErrorCodesAreDocumented: docs/errors.md lists, per service, exactly
// the codes its code can answer with: every error code is a constant
// (Code… or code…), and a code counts as emitted by a service when the
// service's packages or the shared ones refer to its constant, directly or
// through the pkg/problem constructors they call.
func TestErrorCodesAreDocumented(t *testing.T) {
	documented := documentedCodes(t, readFile(t, "docs/errors.md"))
	for _, svc := range []string{"account", "conversations"} {
		t.Run(svc, func(t *testing.T) {
			emitted := emittedCodes(t, append([]string{"services/" + svc}, sharedPackages...))
			docs := documented[svc]
			for _, c := range emitted {
				if !slices.Contains(docs, c) {
					t.Errorf("%s can answer with code %q, which docs/errors.md does not list for it", svc, c)
				}
			}
			for _, c := range docs {
				if !slices.Contains(emitted, c) {
					t.Errorf("docs/errors.md lists code %q for %s, which its code never emits", c, svc)
				}
			}
		})
	}
}

// documentedCodes reads the tables of docs/errors.md whose header has a
// code (or error) column and a services column: the codes of each service
// ("both" names both).
func documentedCodes(t *testing.T, doc string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	codeCol, servicesCol := -1, -1
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(line, "|") {
			codeCol, servicesCol = -1, -1
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if codeCol < 0 {
			codeCol = slices.IndexFunc(cells, func(c string) bool { return c == "code" || c == "error" })
			servicesCol = slices.Index(cells, "services")
			if codeCol < 0 || servicesCol < 0 {
				codeCol, servicesCol = -2, -2 // another kind of table
			}
			continue
		}
		if codeCol == -2 || strings.HasPrefix(cells[0], "---") {
			continue
		}
		code := strings.Trim(cells[codeCol], "`")
		for svc := range strings.SplitSeq(cells[servicesCol], ",") {
			switch svc = strings.TrimSpace(svc); svc {
			case "both":
				out["account"] = append(out["account"], code)
				out["conversations"] = append(out["conversations"], code)
			case "account", "conversations":
				out[svc] = append(out[svc], code)
			default:
				t.Errorf("docs/errors.md: code %s names service %q (want account, conversations or both)", code, svc)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/errors.md has no table of codes with a services column")
	}
	return out
}

var codeName = regexp.MustCompile(`^[Cc]ode[A-Z]`)

// program is what the scan of the source knows: the code constants, and
// for each function (and package-level declaration) the codes it refers to
// and the functions it calls, all named "dir.Name".
type program struct {
	codes map[string]string
	refs  map[string][]string
	calls map[string][]string
	dir   map[string]string // of each function
}

// emittedCodes returns the codes referred to by the functions of the
// packages under roots, and by the functions of pkg/problem they call.
func emittedCodes(t *testing.T, roots []string) []string {
	t.Helper()
	p := scan(t, append(slices.Clone(roots), "pkg/problem"))
	seen := map[string]bool{}
	var visit func(fn string)
	visit = func(fn string) {
		if seen[fn] {
			return
		}
		seen[fn] = true
		for _, c := range p.calls[fn] {
			visit(c)
		}
	}
	for fn, dir := range p.dir {
		for _, r := range roots {
			if dir == r || strings.HasPrefix(dir, r+"/") {
				visit(fn)
			}
		}
	}
	var out []string
	for fn := range seen {
		for _, c := range p.refs[fn] {
			if !slices.Contains(out, p.codes[c]) {
				out = append(out, p.codes[c])
			}
		}
	}
	slices.Sort(out)
	return out
}

// scan parses the non-test Go files under dirs.
func scan(t *testing.T, dirs []string) program {
	t.Helper()
	type file struct {
		dir     string
		f       *ast.File
		imports map[string]string // local name → dir
	}
	var files []file
	fset := token.NewFileSet()
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			fl := file{dir: filepath.ToSlash(rel), f: f, imports: map[string]string{}}
			for _, imp := range f.Imports {
				ip, _ := strconv.Unquote(imp.Path.Value)
				if !strings.HasPrefix(ip, modulePrefix) {
					continue
				}
				name := ip[strings.LastIndex(ip, "/")+1:]
				if imp.Name != nil {
					name = imp.Name.Name
				}
				fl.imports[name] = strings.TrimPrefix(ip, modulePrefix)
			}
			files = append(files, fl)
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	p := program{codes: map[string]string{}, refs: map[string][]string{}, calls: map[string][]string{}, dir: map[string]string{}}
	funcs := map[string]bool{}
	for _, fl := range files {
		for _, decl := range fl.f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					funcs[fl.dir+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, spec := range d.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if !codeName.MatchString(n.Name) || i >= len(vs.Values) {
							continue
						}
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							p.codes[fl.dir+"."+n.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	for _, fl := range files {
		for i, decl := range fl.f.Decls {
			name := fl.dir + ".decl" + strconv.Itoa(i) // package-level declarations: always roots of their package
			if d, ok := decl.(*ast.FuncDecl); ok {
				name = fl.dir + "." + d.Name.Name
				if d.Recv != nil {
					name = fl.dir + ".method" + strconv.Itoa(i) + "." + d.Name.Name
				}
			}
			p.dir[name] = fl.dir
			ast.Inspect(decl, func(n ast.Node) bool {
				var target string
				switch x := n.(type) {
				case *ast.SelectorExpr:
					if id, ok := x.X.(*ast.Ident); ok {
						if dir, ok := fl.imports[id.Name]; ok {
							target = dir + "." + x.Sel.Name
						}
					}
				case *ast.Ident:
					target = fl.dir + "." + x.Name
				case *ast.CallExpr:
					checkCodeArgument(t, fset, fl.imports, x)
				}
				if _, ok := p.codes[target]; ok && !isDeclaration(decl, n) {
					p.refs[name] = append(p.refs[name], target)
				}
				if funcs[target] {
					p.calls[name] = append(p.calls[name], target)
				}
				return true
			})
		}
	}
	if len(p.codes) == 0 {
		t.Fatal("no code constants found")
	}
	return p
}

// isDeclaration reports whether n is the name of a constant that decl
// declares (a declaration is no use of the code).
func isDeclaration(decl ast.Decl, n ast.Node) bool {
	g, ok := decl.(*ast.GenDecl)
	if !ok || g.Tok != token.CONST {
		return false
	}
	for _, spec := range g.Specs {
		for _, name := range spec.(*ast.ValueSpec).Names {
			if name == n {
				return true
			}
		}
	}
	return false
}

// checkCodeArgument fails the test for a problem constructor called with
// a literal code: every code must be a constant, or the scan cannot see it.
func checkCodeArgument(t *testing.T, fset *token.FileSet, imports map[string]string, call *ast.CallExpr) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return
	}
	id, ok := sel.X.(*ast.Ident)
	if !ok || imports[id.Name] != "pkg/problem" {
		return
	}
	arg := -1
	switch sel.Sel.Name {
	case "New":
		arg = 1
	case "BadRequest":
		arg = 0
	}
	if arg >= 0 && arg < len(call.Args) {
		if _, ok := call.Args[arg].(*ast.BasicLit); ok {
			t.Errorf("%s: problem.%s with a literal code: make it a Code… constant", fset.Position(call.Pos()), sel.Sel.Name)
		}
	}
}
