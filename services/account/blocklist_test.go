package account

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
)

var updateBlocklist = flag.Bool("update-blocklist", false, "rewrite "+comparableBlocklistFile+" from "+sourceBlocklistFile)

const (
	// sourceBlocklistFile is the list as its source ships it.
	sourceBlocklistFile = "data/common-passwords.txt.gz"
	// comparableBlocklistFile is what the service embeds.
	comparableBlocklistFile = "data/common-passwords.comparable.txt.gz"
)

// TestBlocklistIsTheSourceInComparableForm derives the embedded blocklist
// from the source list: every entry's comparable form, without empty and
// repeated ones, sorted. A change of the source or of comparablePassword
// fails here until the embedded file is rewritten:
//
//	go test ./services/account -run TestBlocklist -update-blocklist
func TestBlocklistIsTheSourceInComparableForm(t *testing.T) {
	forms := comparableSourceForms(t)
	want := strings.Join(forms, "\n") + "\n"
	if *updateBlocklist {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := zw.Write([]byte(want)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(comparableBlocklistFile, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %d entries, %d bytes; rebuild to embed it", comparableBlocklistFile, len(forms), buf.Len())
		return
	}
	embedded, err := blockedPasswords()
	if err != nil {
		t.Fatal(err)
	}
	if string(embedded) != want {
		t.Fatalf("the embedded blocklist (%d bytes) is not %s in comparable form (%d bytes); rewrite it: go test ./services/account -run TestBlocklist -update-blocklist",
			len(embedded), sourceBlocklistFile, len(want))
	}
	for _, form := range forms {
		if !embedded.contains(form) {
			t.Fatalf("the blocklist does not find its own entry %q", form)
		}
	}
}

// comparableSourceForms reads the source list and returns the distinct
// comparable forms of its entries, sorted.
func comparableSourceForms(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile(sourceBlocklistFile)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	var forms []string
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		if form := comparablePassword(strings.TrimRight(sc.Text(), "\r")); form != "" {
			forms = append(forms, form)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(forms)
	return slices.Compact(forms)
}

// TestSortedLinesContains finds each line of a list and nothing else: not
// an empty string, not a prefix or an extension of a line, not what sorts
// before the first or after the last.
func TestSortedLinesContains(t *testing.T) {
	lines := []string{"a", "ab", "abc", "b", "bb", "c", "zz\u00e9", "\u00e9t\u00e9"}
	for n := range len(lines) + 1 {
		list := sortedLines(strings.Join(lines[:n], "\n"))
		if n > 0 {
			list += "\n"
		}
		for i, line := range lines {
			if got, want := list.contains(line), i < n; got != want {
				t.Errorf("%d lines: contains(%q) = %v, want %v", n, line, got, want)
			}
		}
		for _, absent := range []string{"", "0", "aa", "abcd", "ba", "bbb", "d", "zz", "\u00e9", "\u00e9t\u00e9s", "\n", "a\nab"} {
			if list.contains(absent) {
				t.Errorf("%d lines: contains(%q) = true", n, absent)
			}
		}
	}
}
