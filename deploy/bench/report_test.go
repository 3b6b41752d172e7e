package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUpdateDocReplacesOnlyTheRerunRows: -out with -only rewrites the
// rows and notes of the measures run again and keeps every other row.
func TestUpdateDocReplacesOnlyTheRerunRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	m := machine{when: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), commit: "full", method: "rounds"}
	full := []row{
		{measure: "A one", subject: "old a", id: "alpha", notes: "old note of a"},
		{measure: "B one", subject: "old b", id: "beta", notes: "note of b"},
		{measure: "A two", subject: "old a2", id: "alpha"},
	}
	if err := os.WriteFile(path, []byte("# Benchmarks\n\nbefore\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeDoc(path, m, full); err != nil {
		t.Fatal(err)
	}
	m.commit = "rerun"
	rerun := []row{{measure: "A one", subject: "new a", id: "alpha", notes: "new note of a"}}
	if err := updateDoc(path, m, rerun, []string{"alpha"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	doc := string(b)
	for _, want := range []string{"new a", "old b", "note of b", "new note of a", "commit rerun", "before"} {
		if !strings.Contains(doc, want) {
			t.Errorf("updated doc lacks %q:\n%s", want, doc)
		}
	}
	for _, gone := range []string{"old a", "old a2", "old note of a"} {
		if strings.Contains(doc, gone) {
			t.Errorf("updated doc still has %q:\n%s", gone, doc)
		}
	}
	if strings.Index(doc, "new a") > strings.Index(doc, "old b") {
		t.Errorf("the rerun rows moved from their place:\n%s", doc)
	}
	if err := updateDoc(path, m, rerun, []string{"gamma"}); err == nil {
		t.Error("updating a measure the table lacks: no error")
	}
}
