package prereqstest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository's root, from deploy/prereqstest.
const root = "../.."

const testSection = "Test prerequisites"

// system is what the fake machine has: the script sees only these programs
// on PATH.
type system struct {
	// debian puts dpkg-query and apt-get on PATH.
	debian bool
	// notInstalled are the packages dpkg-query reports as not installed.
	notInstalled []string
	uid          int
	sudo         bool
	// uname is what uname -s prints ("" for no uname).
	uname string
	// programs are further programs on PATH, each exiting 0.
	programs []string
}

// result is what a run of the script did: its exit, its output, and every
// call of a fake program that records one (dpkg-query, apt-get, sudo), in
// order.
type result struct {
	err            error
	stdout, stderr string
	calls          []string
}

// run runs deploy/prereqs.sh SECTION on the fake system sys.
func run(t *testing.T, sys system, section string) result {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "calls")
	fake := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	record := fmt.Sprintf("printf '%%s\\n' \"$*\" >>'%s'\n", log)
	fake("id", fmt.Sprintf("[ \"$1\" = -u ] && echo %d\n", sys.uid))
	if sys.debian {
		// The lines the script asks for ("STATUS NAME"); a package dpkg
		// knows but has not installed is "not-installed".
		fake("dpkg-query", strings.ReplaceAll(record, `"$*"`, `"dpkg-query $*"`)+fmt.Sprintf(`
for p; do
	case $p in
	-*) ;;
	%s) echo "not-installed $p" ;;
	*) echo "installed $p" ;;
	esac
done
`, strings.Join(append(slices.Clone(sys.notInstalled), "/"), "|")))
		fake("apt-get", strings.ReplaceAll(record, `"$*"`, `"apt-get $* [DEBIAN_FRONTEND=${DEBIAN_FRONTEND-}]"`))
	}
	if sys.sudo {
		// As sudo's env_reset: the command gets only the variables given
		// on sudo's command line.
		fake("sudo", strings.ReplaceAll(record, `"$*"`, `"sudo $*"`)+`unset DEBIAN_FRONTEND
while case $1 in *=*) true ;; *) false ;; esac; do export "$1"; shift; done
exec "$@"
`)
	}
	if sys.uname != "" {
		fake("uname", "echo "+sys.uname+"\n")
	}
	for _, p := range sys.programs {
		fake(p, "exit 0\n")
	}

	script, err := filepath.Abs(filepath.Join(root, "deploy", "prereqs.sh"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, section)
	cmd.Env = []string{"PATH=" + bin}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	res := result{err: cmd.Run(), stdout: stdout.String(), stderr: stderr.String()}
	if err := res.err; err != nil && !errors.As(err, new(*exec.ExitError)) {
		t.Fatalf("running %s: %v", script, err)
	}
	b, err := os.ReadFile(log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	res.calls = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(b) == 0 {
		res.calls = nil
	}
	return res
}

// readmePackages returns the packages of the "apt-get install" line of the
// README's section, in their order.
func readmePackages(t *testing.T, section string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case line == "## "+section:
			in = true
		case strings.HasPrefix(line, "## "):
			in = false
		case in && strings.HasPrefix(line, "apt-get install "):
			var pkgs []string
			for _, f := range strings.Fields(strings.TrimPrefix(line, "apt-get install ")) {
				if !strings.HasPrefix(f, "-") {
					pkgs = append(pkgs, f)
				}
			}
			return pkgs
		}
	}
	t.Fatalf("README.md has no apt-get install line under ## %s", section)
	return nil
}

// pick returns names, failing unless the README's packages have them all,
// in the README's order.
func pick(t *testing.T, pkgs []string, names ...string) []string {
	t.Helper()
	var picked []string
	for _, p := range pkgs {
		if slices.Contains(names, p) {
			picked = append(picked, p)
		}
	}
	if len(picked) != len(names) {
		t.Fatalf("the README's line %v lacks some of %v", pkgs, names)
	}
	return picked
}

// afterDpkg returns the calls after the first, which must be dpkg-query's.
func afterDpkg(t *testing.T, calls []string) []string {
	t.Helper()
	if len(calls) == 0 || !strings.HasPrefix(calls[0], "dpkg-query ") {
		t.Fatalf("calls %q do not start with dpkg-query", calls)
	}
	return calls[1:]
}

func check(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// With every package installed, the script asks dpkg once and does
// nothing else: no apt-get, not a word.
func TestNothingMissingDoesNothing(t *testing.T) {
	for _, section := range []string{testSection, "Lint prerequisites"} {
		t.Run(section, func(t *testing.T) {
			pkgs := readmePackages(t, section)
			res := run(t, system{debian: true, uid: 1000}, section)
			if res.err != nil || res.stdout != "" || res.stderr != "" {
				t.Errorf("exit %v, stdout %q, stderr %q; want a silent success", res.err, res.stdout, res.stderr)
			}
			check(t, "calls", res.calls, []string{"dpkg-query -W -f=${db:Status-Status} ${Package}\\n " + strings.Join(pkgs, " ")})
		})
	}
}

// As root, the script updates apt's lists, then installs exactly the
// packages neither dpkg has nor PATH provides, in the README's order.
func TestSomeMissingInstallsThemAsRoot(t *testing.T) {
	pkgs := readmePackages(t, testSection)
	install := pick(t, pkgs, "python3-venv", "phpunit", "chromium")
	res := run(t, system{
		debian: true,
		// In another order than the README's, and wrk dpkg lacks but PATH has.
		notInstalled: []string{"chromium", "wrk", "phpunit", "python3-venv"},
		uid:          0,
		programs:     []string{"wrk"},
	}, testSection)
	if res.err != nil {
		t.Fatalf("exit %v; stderr %s", res.err, res.stderr)
	}
	check(t, "apt-get calls", afterDpkg(t, res.calls), []string{
		"apt-get update -q [DEBIAN_FRONTEND=noninteractive]",
		"apt-get install -y -q " + strings.Join(install, " ") + " [DEBIAN_FRONTEND=noninteractive]",
	})
	if !strings.Contains(res.stdout, "Test prerequisites") || !strings.Contains(res.stdout, strings.Join(install, " ")) {
		t.Errorf("stdout %q does not say what it installs and why", res.stdout)
	}
}

// Not root, with sudo: the same calls, each through sudo, the frontend
// passed on sudo's command line.
func TestSomeMissingInstallsThemWithSudo(t *testing.T) {
	pkgs := readmePackages(t, testSection)
	install := pick(t, pkgs, "php-cli", "php-curl", "wrk")
	res := run(t, system{debian: true, notInstalled: install, uid: 1000, sudo: true}, testSection)
	if res.err != nil {
		t.Fatalf("exit %v; stderr %s", res.err, res.stderr)
	}
	check(t, "calls", afterDpkg(t, res.calls), []string{
		"sudo apt-get update -q",
		"apt-get update -q [DEBIAN_FRONTEND=]",
		"sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q " + strings.Join(install, " "),
		"apt-get install -y -q " + strings.Join(install, " ") + " [DEBIAN_FRONTEND=noninteractive]",
	})
	if !strings.Contains(res.stdout, "with sudo") {
		t.Errorf("stdout %q does not say it uses sudo", res.stdout)
	}
}

// Not root and no sudo: the script fails naming the packages and the
// command that installs them, and installs nothing.
func TestNotRootWithoutSudoFailsNamingTheCommand(t *testing.T) {
	pkgs := readmePackages(t, testSection)
	missing := pick(t, pkgs, "composer", "wrk")
	res := run(t, system{debian: true, notInstalled: missing, uid: 1000}, testSection)
	if res.err == nil {
		t.Fatalf("exit 0; want a failure (stdout %q)", res.stdout)
	}
	if want := "apt-get install -y " + strings.Join(missing, " "); !strings.Contains(res.stderr, want) || !strings.Contains(res.stderr, "root") {
		t.Errorf("stderr %q does not name root and %q", res.stderr, want)
	}
	if len(res.calls) != 1 || !strings.HasPrefix(res.calls[0], "dpkg-query ") {
		t.Errorf("calls %q; want dpkg-query alone", res.calls)
	}
}

// Without dpkg, on macOS: the script fails naming the Homebrew packages of
// what PATH lacks, and installs nothing.
func TestMacOSNamesHomebrewPackages(t *testing.T) {
	pick(t, readmePackages(t, testSection), "chromium", "wrk")
	res := run(t, system{uname: "Darwin", programs: []string{"python3", "mypy", "php", "phpunit", "composer"}}, testSection)
	if res.err == nil {
		t.Fatalf("exit 0; want a failure (stdout %q)", res.stdout)
	}
	for _, want := range []string{"  brew install wrk\n", "  brew install --cask chromium\n"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr %q lacks %q", res.stderr, want)
		}
	}
	if res.calls != nil {
		t.Errorf("calls %q; want none", res.calls)
	}
}
