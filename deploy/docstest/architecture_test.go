package docstest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mapEntry is a heading or a bullet of docs/architecture.md's code map
// that starts with a path in backquotes: the entry of that folder.
var mapEntry = regexp.MustCompile("(?m)^(?:#{3,4}|-) `([A-Za-z0-9_./-]+?)/?`")

// repoPath is a path of the repository named in backquotes.
var repoPath = regexp.MustCompile("`((?:pkg|services|clients|deploy|docs)/[A-Za-z0-9_./-]*)`")

// TestArchitectureMapsEveryPackage: docs/architecture.md's code map has an
// entry for every folder of Go files (testdata aside), and every path the
// document names exists.
func TestArchitectureMapsEveryPackage(t *testing.T) {
	doc := readFile(t, "docs/architecture.md")
	entries := map[string]bool{}
	for _, m := range mapEntry.FindAllStringSubmatch(section(t, doc, "## Code map"), -1) {
		entries[m[1]] = true
	}
	if len(entries) == 0 {
		t.Fatal("no entries in the code map")
	}
	for _, dir := range goPackageDirs(t) {
		if !entries[dir] {
			t.Errorf("the code map has no entry for %s", dir)
		}
	}
	for dir := range entries {
		if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
			t.Errorf("the code map has an entry for %s, which does not exist", dir)
		}
	}
	for _, m := range repoPath.FindAllStringSubmatch(doc, -1) {
		if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(m[1], "/"))); err != nil {
			t.Errorf("docs/architecture.md names %s, which does not exist", m[1])
		}
	}
}

// walkHeading is the heading of a request walk: the request, and how many
// files the walk opens.
var walkHeading = regexp.MustCompile("(?m)^### (`[^`]+`) \\((?:[^)]*, )?(\\d+) files\\)$")

// walkStep is a numbered step of a walk, starting with the file it opens.
var walkStep = regexp.MustCompile("(?m)^\\d+\\. `([^`]+)`")

// TestArchitectureWalksCountTheirFiles: each request walk of
// docs/architecture.md opens as many files as its heading says, each of
// which exists, and at most ten.
func TestArchitectureWalksCountTheirFiles(t *testing.T) {
	text := section(t, readFile(t, "docs/architecture.md"), "## Four requests, end to end")
	heads := walkHeading.FindAllStringSubmatchIndex(text, -1)
	if len(heads) != 4 {
		t.Fatalf("%d walks, want 4", len(heads))
	}
	for i, h := range heads {
		name := text[h[2]:h[3]]
		claimed, _ := strconv.Atoi(text[h[4]:h[5]])
		end := len(text)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		var files []string
		for _, m := range walkStep.FindAllStringSubmatch(text[h[1]:end], -1) {
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("walk %s opens %s, which does not exist", name, m[1])
			}
			if !slices.Contains(files, m[1]) {
				files = append(files, m[1])
			}
		}
		if len(files) != claimed {
			t.Errorf("walk %s opens %d files; its heading says %d", name, len(files), claimed)
		}
		if len(files) > 10 {
			t.Errorf("walk %s opens %d files; a walk takes at most ten", name, len(files))
		}
	}
}

// goPackageDirs returns every folder of the repository that holds Go
// files, but testdata, node_modules and hidden folders.
func goPackageDirs(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if e.IsDir() && path != root && (name == "node_modules" || name == "vendor" || name == "testdata" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(name, ".go") {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	return dirs
}
