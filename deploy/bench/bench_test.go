package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRunPrintsEveryRatio runs the whole harness with short runs and a
// small listing: every measure must come out as a row with a number, and
// -out must rewrite only the generated part of the document. The figures
// of so short a run mean nothing; "make bench" runs the real thing.
func TestRunPrintsEveryRatio(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "benchmarks.md")
	intro := "# Benchmarks\n\nHand-written text above.\n\n"
	outro := "\n## Hand-written text below\n"
	if err := os.WriteFile(doc, []byte(intro+beginMarker+"\nold table\n"+endMarker+"\n"+outro), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	args := []string{"-rounds", "1", "-cpu-run", "5ms", "-service-run", "10ms", "-workers", "1",
		"-conversations", "31", "-depth", "3", "-messages", "21", "-idle-streams", "12", "-changes", "3",
		"-stream-backlog", "200000", "-unread-streams", "3", "-settle", "0", "-idle-window", "200ms", "-tracing-posts", "5", "-out", doc}
	if err := run(context.Background(), args, os.Getenv, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"Token verify RS256: library vs bare", "Token verify RS256: library vs golang-jwt",
		"Token verify ES256: library vs bare", "Token verify EdDSA: library vs golang-jwt",
		"vs bare argon2id", "vs argon2id + the 3 token signatures", "CPU per login",
		"Client credentials: POST /oauth2/token", "CPU per token of the account process",
		"sign-in page → form submitted → redirect → token, vs argon2id + the 3 token signatures",
		"single sign-on (session present) authorize → redirect → token, vs a client_credentials token",
		"Users: POST /users vs one argon2id hash + one insert", "Users: GET /users (100 per page) vs driver find",
		"Listing: GET /v1/conversations vs driver find", "Listing: cost of page 3 vs page 1",
		"CPU per page of the conversations process",
		"Messages: POST /v1/conversations/{id}/messages vs the same writes", "Messages: GET /v1/conversations/{id}/messages vs driver find",
		"Events: GET /v1/events, a page of 100", "idle streams open on the replica", "its event in the feed", "its event in an open stream",
		"streams from after=0 that never read",
		"Relay: a message posted → its event in the log", "Relay: database commands of all replicas per event ordered",
		"Webhooks: deliveries to a local receiver vs a bare loop of signed POSTs", "Webhooks: change → 2xx at the receiver",
		"Webhooks: POST /v1/conversations/{id}/messages with 3 endpoints subscribed",
		"Webhooks: database commands of all replicas per delivery",
		"Tracing on: GET /v1/conversations", "Tracing configured off: POST /v1/conversations/{id}/messages",
		"Start-up: account", "Start-up: conversations",
	} {
		line := lineWith(out, want)
		if line == "" {
			t.Errorf("no row %q in:\n%s", want, out)
			continue
		}
		if !regexp.MustCompile(`\*\*[0-9]+(\.[0-9]+)?\*\*| \*\*[0-9]+ ms\*\*`).MatchString(line) {
			t.Errorf("row %q has no figure: %s", want, line)
		}
		if !strings.Contains(line, "`go run ./deploy/bench -only ") {
			t.Errorf("row %q has no command: %s", want, line)
		}
	}
	// Commands per operation beside every row of a database: the judged
	// rows with the service's count and the driver's where it has one.
	for want, cmds := range map[string]string{
		"Messages: POST /v1/conversations/{id}/messages vs the same writes": `\| [0-9]+\.[0-9]{2} / 3\.00 \| ≤ 6\.0 cmds/op`,
		"Webhooks: deliveries to a local receiver":                          `\| [0-9]+\.[0-9]{2} / – \| ≤ 2\.00 cmds/op`,
		"Messages: GET /v1/conversations/{id}/messages vs driver find":      `\| [0-9]+\.[0-9]{2} / 2\.00 \|`,
		"Listing: GET /v1/conversations vs driver find":                     `\| [0-9]+\.[0-9]{2} / 1\.00 \|`,
		"Users: GET /users (100 per page) vs driver find":                   `\| [0-9]+\.[0-9]{2} / [0-9]+\.[0-9]{2} \|`,
		"vs bare argon2id": `\| [0-9]+\.[0-9]{2} / – \|`,
	} {
		if line := lineWith(out, want); !regexp.MustCompile(cmds).MatchString(line) {
			t.Errorf("row %q has no commands per operation %s: %s", want, cmds, line)
		}
	}
	for _, want := range []string{"- Machine: ", "- Store: ", "- Each ratio: 1 rounds", "| cmds/op (ours / reference) |"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the header:\n%s", want, out)
		}
	}

	written, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	w := string(written)
	if !strings.HasPrefix(w, intro+beginMarker) || !strings.HasSuffix(w, endMarker+"\n"+outro) || strings.Contains(w, "old table") {
		t.Errorf("document not rewritten between its markers:\n%s", w)
	}
	if !strings.Contains(w, lineWith(out, "Start-up: account")) {
		t.Errorf("document lacks the table:\n%s", w)
	}
	if !strings.Contains(w, "### Commands per operation") || !strings.Contains(w, "**4/4 = 1.00** a delivery") {
		t.Errorf("document lacks the cost model:\n%s", w)
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-only", "nonsense"},
		{"-rounds", "0"},
		{"-idle-window", "0"},
		{"-tracing-posts", "0"},
		{"-settle", "-1s"},
		{"-depth", "50", "-conversations", "100"},
		{"-messages", "10"},
		{"-unread-streams", "0"},
		{"-only", "login", "-out", "x.md"},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, os.Getenv, &stdout, &stderr); err == nil {
			t.Errorf("run %v: no error", args)
		}
	}
}

func lineWith(text, substr string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}
