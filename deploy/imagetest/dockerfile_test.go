// Package imagetest checks the services' Dockerfiles without a Docker
// engine: what the final image runs is a binary this workspace builds, as
// a non-root user on a minimal base, with the version stamped in, and the
// builder's Go version is the workspace's.
package imagetest

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	"github.com/acme/platform/deploy/internal/servicecfg"
)

// instruction is one Dockerfile instruction with continuations joined.
type instruction struct {
	cmd, args string
}

func parse(t *testing.T, path string) []instruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

func workGoVersion(t *testing.T, root string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil || work.Go == nil {
		t.Fatalf("go.work: %v", err)
	}
	parts := strings.Split(work.Go.Version, ".")
	return parts[0] + "." + parts[1]
}

var goImage = regexp.MustCompile(`^golang:(\d+\.\d+)(\.\d+)?(-\S+)?\s+AS\s+\S+$`)

func TestDockerfiles(t *testing.T) {
	root, err := servicecfg.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	goVersion := workGoVersion(t, root)
	for _, svc := range []string{"account", "conversations"} {
		t.Run(svc, func(t *testing.T) {
			ins := parse(t, filepath.Join(root, "services", svc, "Dockerfile"))
			var stages []string
			var final []instruction // instructions of the last stage
			builds := false
			for _, in := range ins {
				if in.cmd == "FROM" {
					stages = append(stages, in.args)
					final = nil
					continue
				}
				final = append(final, in)
				if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
					builds = strings.Contains(in.args, "-o /out/"+svc) && strings.Contains(in.args, "./cmd/"+svc) &&
						strings.Contains(in.args, "-X main.version=")
				}
			}
			if len(stages) != 2 {
				t.Fatalf("stages = %v, want a builder and a runtime stage", stages)
			}
			m := goImage.FindStringSubmatch(stages[0])
			if m == nil || m[1] != goVersion {
				t.Errorf("builder %q does not use Go %s of go.work", stages[0], goVersion)
			}
			if base := stages[1]; !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
				t.Errorf("runtime base %q is not distroless static or scratch", base)
			}
			if !builds {
				t.Errorf("no go build of ./cmd/%s into /out/%s with the version stamped in", svc, svc)
			}
			if _, err := os.Stat(filepath.Join(root, "services", svc, "cmd", svc, "main.go")); err != nil {
				t.Errorf("the workspace has no cmd/%s to build: %v", svc, err)
			}
			want := map[string]string{
				"COPY":        "--from=build /out/" + svc + " /" + svc,
				"USER":        "65532:65532",
				"ENTRYPOINT":  `["/` + svc + `"]`,
				"HEALTHCHECK": `CMD ["/` + svc + `", "healthcheck"]`,
			}
			for cmd, args := range want {
				ok := false
				for _, in := range final {
					if in.cmd == cmd && strings.HasSuffix(in.args, args) {
						ok = true
					}
				}
				if !ok {
					t.Errorf("runtime stage lacks %s ...%s", cmd, args)
				}
			}
		})
	}
}
