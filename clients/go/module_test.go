package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportingTheClientPullsNoTestInfrastructure builds a tiny program
// outside the workspace that imports only the client, as another backend
// would, with the one replace and the go mod tidy that the README gives
// for the unpublished module, and checks that no other module of this repository, none of our
// test infrastructure, nor the deployment libraries, reaches its build,
// its go.mod or its go.sum.
func TestImportingTheClientPullsNoTestInfrastructure(t *testing.T) {
	// go test runs a package's tests in its folder (and make test builds
	// with -trimpath, so the source paths the binary records are not real).
	clientDir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", `module example.com/tiny

go 1.26.0

replace github.com/acme/platform/clients/go => `+clientDir+`
`)
	write("main.go", `package main

import (
	"fmt"

	client "github.com/acme/platform/clients/go"
)

func main() {
	c, err := client.New(client.Config{AccountURL: "http://localhost:8080"})
	fmt.Println(c != nil, err)
}
`)
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// The caller's GOFLAGS stay (make test's -trimpath), so that this
		// build shares the standard library's compilation with the tests'.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	goCmd("mod", "tidy")
	goCmd("build", "-o", filepath.Join(dir, "tiny"), ".")
	deps := goCmd("list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".")
	graph := goCmd("mod", "graph")
	modFile, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	sumFile, _ := os.ReadFile(filepath.Join(dir, "go.sum"))

	for _, forbidden := range []string{
		"github.com/FerretDB", "modernc.org/sqlite", "github.com/ory/dockertest", "github.com/getkin/kin-openapi",
		"github.com/acme/platform/pkg/testkit", "sigs.k8s.io/kustomize", "k8s.io/api", "k8s.io/apimachinery",
		"github.com/prometheus/prometheus", "github.com/acme/platform/pkg", "github.com/acme/platform/services",
	} {
		for what, text := range map[string]string{"build": deps, "module graph": graph, "go.mod": string(modFile), "go.sum": string(sumFile)} {
			if strings.Contains(text, forbidden) {
				t.Errorf("a program importing only the client has %s in its %s", forbidden, what)
			}
		}
	}
	// The positive control: the client itself is built.
	if !strings.Contains(deps, "github.com/acme/platform/clients/go") {
		t.Fatalf("the build does not list the client:\n%s", deps)
	}
}
