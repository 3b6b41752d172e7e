package npmcache_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/acme/platform/deploy/internal/npmcache"
)

// project writes a package folder with the given lock file and source.
func project(t *testing.T, lock, source string) string {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "package.json"), `{"name":"p","scripts":{"build":"tsc"}}`)
	write(t, filepath.Join(dir, "package-lock.json"), lock)
	write(t, filepath.Join(dir, "tsconfig.json"), `{}`)
	write(t, filepath.Join(dir, "src", "index.ts"), source)
	return dir
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeNPM stands for npm: "ci" writes a package and a .bin link into
// node_modules, "run build" writes dist from the source; it counts its runs.
type fakeNPM struct{ runs map[string]int }

func (f *fakeNPM) run(_ context.Context, dir string, args ...string) error {
	f.runs[args[1]]++
	switch args[1] {
	case "ci":
		if err := os.RemoveAll(filepath.Join(dir, "node_modules")); err != nil {
			return err
		}
		lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
		if err != nil {
			return err
		}
		pkg := filepath.Join(dir, "node_modules", "tool")
		if err := os.MkdirAll(filepath.Join(dir, "node_modules", ".bin"), 0o755); err != nil {
			return err
		}
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(pkg, "index.js"), lock, 0o644); err != nil {
			return err
		}
		return os.Symlink("../tool/index.js", filepath.Join(dir, "node_modules", ".bin", "tool"))
	case "run":
		src, err := os.ReadFile(filepath.Join(dir, "src", "index.ts"))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, "dist"), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "dist", "index.js"), src, 0o644)
	}
	return nil
}

// fakeTools puts node and npm scripts that print their versions first on
// PATH (the real npm takes a third of a second to say its version), and
// returns the file that holds npm's version.
func fakeTools(t *testing.T) (npmVersion string) {
	t.Helper()
	bin := t.TempDir()
	npmVersion = filepath.Join(bin, "npm-version")
	write(t, npmVersion, "10.0.0")
	write(t, filepath.Join(bin, "node"), "#!/bin/sh\necho v20.0.0\n")
	write(t, filepath.Join(bin, "npm"), "#!/bin/sh\ncat "+npmVersion+"\n")
	for _, tool := range []string{"node", "npm"} {
		if err := os.Chmod(filepath.Join(bin, tool), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return npmVersion
}

func prepare(t *testing.T, npm *fakeNPM, dir string) {
	t.Helper()
	if err := npmcache.InstallAndBuild(t.Context(), dir, "src", "dist", npm.run); err != nil {
		t.Fatal(err)
	}
}

func TestASecondCheckoutGetsWhatTheFirstMade(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	fakeTools(t)
	npm := &fakeNPM{runs: map[string]int{}}

	first := project(t, "lock 1", "source 1")
	prepare(t, npm, first)
	second := project(t, "lock 1", "source 1")
	prepare(t, npm, second)
	if npm.runs["ci"] != 1 || npm.runs["run"] != 1 {
		t.Fatalf("npm ran %v, want ci and the build once", npm.runs)
	}
	if got := read(t, filepath.Join(second, "node_modules", ".bin", "tool")); got != "lock 1" {
		t.Errorf("node_modules/.bin/tool of the second checkout: %q", got)
	}
	if got := read(t, filepath.Join(second, "dist", "index.js")); got != "source 1" {
		t.Errorf("dist of the second checkout: %q", got)
	}

	// The build output is a copy: rewriting it in one checkout leaves the
	// next one's alone.
	write(t, filepath.Join(second, "dist", "index.js"), "rewritten")
	third := project(t, "lock 1", "source 1")
	prepare(t, npm, third)
	if got := read(t, filepath.Join(third, "dist", "index.js")); got != "source 1" {
		t.Errorf("dist of the third checkout: %q", got)
	}
}

func TestChangedInputsRunTheCommandsAgain(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	npmVersion := fakeTools(t)
	npm := &fakeNPM{runs: map[string]int{}}
	prepare(t, npm, project(t, "lock 1", "source 1"))

	source := project(t, "lock 1", "source 2")
	prepare(t, npm, source)
	if npm.runs["ci"] != 1 || npm.runs["run"] != 2 {
		t.Fatalf("after a source change npm ran %v, want ci once and the build twice", npm.runs)
	}
	if got := read(t, filepath.Join(source, "dist", "index.js")); got != "source 2" {
		t.Errorf("dist: %q", got)
	}

	lock := project(t, "lock 2", "source 2")
	prepare(t, npm, lock)
	if npm.runs["ci"] != 2 || npm.runs["run"] != 3 {
		t.Fatalf("after a lock change npm ran %v, want ci twice and the build three times", npm.runs)
	}
	if got := read(t, filepath.Join(lock, "node_modules", "tool", "index.js")); got != "lock 2" {
		t.Errorf("node_modules: %q", got)
	}

	write(t, npmVersion, "11.0.0")
	prepare(t, npm, project(t, "lock 2", "source 2"))
	if npm.runs["ci"] != 3 || npm.runs["run"] != 4 {
		t.Fatalf("after another npm npm ran %v, want ci three times and the build four times", npm.runs)
	}
}

func TestAFailedCommandLeavesNoEntry(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	fakeTools(t)
	runs := 0
	failing := func(context.Context, string, ...string) error { runs++; return os.ErrPermission }
	for range 2 {
		if err := npmcache.Install(t.Context(), project(t, "lock", "source"), failing); err == nil {
			t.Fatal("Install succeeded with a failing npm ci")
		}
	}
	if runs != 2 {
		t.Fatalf("npm ci ran %d times, want 2 (nothing stored after a failure)", runs)
	}
}
