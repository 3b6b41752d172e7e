// Package servicecfg reads, from source, which environment variables a
// service binary understands, so that deployment files (compose,
// Kubernetes) can be checked against them without importing the services'
// main packages.
package servicecfg

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
)

// RepoRoot is the folder of the go.work this code builds in.
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %w", err)
	}
	work := strings.TrimSpace(string(out))
	if work == "" || work == "off" {
		return "", fmt.Errorf("not in a go workspace")
	}
	return filepath.Dir(work), nil
}

// EnvVars returns the variables of service's binary, read from
// services/<service>/cmd/<service>/config.go.
func EnvVars(repoRoot, service string) (map[string]Var, error) {
	return EnvVarsOf(filepath.Join(repoRoot, "services", service, "cmd", service, "config.go"))
}

// Var is one variable a service binary reads.
type Var struct {
	Name    string // with the prefix: ACCOUNT_HTTP_ADDR
	Default string // the `default` tag, "" when none
}

// EnvVarsOf returns the variables the service whose config.go is at path
// reads, keyed by name, as kelseyhightower/envconfig derives them: the
// package's envPrefix constant, "_", and the field's `envconfig` tag (the
// upper-cased field name when there is none).
func EnvVarsOf(path string) (map[string]Var, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	var parseErr error
	prefix := ""
	var cfg *ast.StructType
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for i, name := range n.Names {
				if name.Name != "envPrefix" || i >= len(n.Values) {
					continue
				}
				lit, ok := n.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					parseErr = fmt.Errorf("%s: envPrefix is not a string literal", path)
					return false
				}
				prefix, _ = strconv.Unquote(lit.Value)
			}
		case *ast.TypeSpec:
			if st, ok := n.Type.(*ast.StructType); ok && n.Name.Name == "config" {
				cfg = st
			}
		}
		return true
	})
	if parseErr != nil {
		return nil, parseErr
	}
	if prefix == "" || cfg == nil {
		return nil, fmt.Errorf("%s: no envPrefix constant or no config struct", path)
	}
	vars := map[string]Var{}
	if err := addVars(vars, path, prefix, cfg); err != nil {
		return nil, err
	}
	if len(vars) == 0 {
		return nil, fmt.Errorf("%s: no variables found", path)
	}
	return vars, nil
}

// addVars adds the variables of the fields of st to vars. An embedded
// servicecmd.Config, whose fields envconfig reads with the same prefix,
// is read from pkg/servicecmd, found from path
// (services/<service>/cmd/<service>/config.go).
func addVars(vars map[string]Var, path, prefix string, st *ast.StructType) error {
	for _, field := range st.Fields.List {
		if len(field.Names) == 0 {
			sel, ok := field.Type.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Config" || fmt.Sprint(sel.X) != "servicecmd" {
				return fmt.Errorf("%s: embedded field in config other than servicecmd.Config; EnvVarsOf does not follow envconfig's nesting rules", path)
			}
			shared, err := sharedConfig(filepath.Join(filepath.Dir(path), "..", "..", "..", "..", "pkg", "servicecmd"))
			if err != nil {
				return err
			}
			if err := addVars(vars, path, prefix, shared); err != nil {
				return err
			}
			continue
		}
		var tag reflect.StructTag
		if field.Tag != nil {
			s, _ := strconv.Unquote(field.Tag.Value)
			tag = reflect.StructTag(s)
		}
		if tag.Get("ignored") == "true" {
			continue
		}
		if tag.Get("split_words") != "" {
			return fmt.Errorf("%s: split_words in config; EnvVarsOf does not implement it", path)
		}
		for _, name := range field.Names {
			if !name.IsExported() {
				continue
			}
			key := tag.Get("envconfig")
			if key == "" {
				key = name.Name
			}
			v := Var{Name: strings.ToUpper(prefix + "_" + key), Default: tag.Get("default")}
			vars[v.Name] = v
		}
	}
	return nil
}

// sharedConfig returns the Config struct of the package in dir.
func sharedConfig(dir string) (*ast.StructType, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", file, err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gen.Specs {
				if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.Name == "Config" {
					if st, ok := ts.Type.(*ast.StructType); ok {
						return st, nil
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("%s: no Config struct", dir)
}
