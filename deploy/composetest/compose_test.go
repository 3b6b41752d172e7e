// Package composetest checks docker-compose.yml with the Compose
// specification's own Go loader: these machines have no Docker engine, so
// the file is proven by tests instead of by "docker compose up".
package composetest

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/acme/platform/deploy/internal/servicecfg"
)

func load(t *testing.T) (*types.Project, string) {
	t.Helper()
	root, err := servicecfg.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	details, err := loader.LoadConfigFiles(context.Background(), []string{filepath.Join(root, "docker-compose.yml")}, root)
	if err != nil {
		t.Fatal(err)
	}
	details.Environment = map[string]string{}
	project, err := loader.LoadWithContext(context.Background(), *details, func(o *loader.Options) {
		o.SetProjectName("acme-platform", true)
	})
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return project, root
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("no service %q", name)
	}
	return s
}

func env(s types.ServiceConfig, key string) string {
	if v, ok := s.Environment[key]; ok && v != nil {
		return *v
	}
	return ""
}

func TestServicesAndHealthchecks(t *testing.T) {
	p, root := load(t)
	if got := slices.Sorted(func(yield func(string) bool) {
		for name := range p.Services {
			if !yield(name) {
				return
			}
		}
	}); strings.Join(got, ",") != "account,conversations,mongodb,provision" {
		t.Fatalf("services = %v", got)
	}

	mongo := service(t, p, "mongodb")
	if !strings.HasPrefix(mongo.Image, "mongo:") {
		t.Errorf("mongodb image %q is not the official mongo image", mongo.Image)
	}
	named := false
	for _, v := range mongo.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Target == "/data/db" {
			if _, ok := p.Volumes[v.Source]; ok {
				named = true
			}
		}
	}
	if !named {
		t.Error("mongodb keeps /data/db in no named volume")
	}

	for _, name := range []string{"mongodb", "account", "conversations"} {
		s := service(t, p, name)
		if s.HealthCheck == nil || len(s.HealthCheck.Test) < 2 || s.HealthCheck.Disable {
			t.Errorf("%s has no healthcheck", name)
		}
	}
	for _, name := range []string{"account", "conversations"} {
		s := service(t, p, name)
		if want := []string{"CMD", "/" + name, "healthcheck"}; !slices.Equal(s.HealthCheck.Test, want) {
			t.Errorf("%s healthcheck = %v, want %v (the binary's own readiness check)", name, s.HealthCheck.Test, want)
		}
		if s.Build == nil {
			t.Fatalf("%s has no build section", name)
		}
		if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil || s.Build.Context != root {
			t.Errorf("%s builds %s in context %s: %v (want the repository root)", name, s.Build.Dockerfile, s.Build.Context, err)
		}
	}
}

func TestStartOrder(t *testing.T) {
	p, _ := load(t)
	want := map[string]map[string]string{
		"account":       {"mongodb": types.ServiceConditionHealthy},
		"conversations": {"mongodb": types.ServiceConditionHealthy, "account": types.ServiceConditionHealthy},
		"provision":     {"account": types.ServiceConditionHealthy},
	}
	for name, deps := range want {
		s := service(t, p, name)
		for dep, cond := range deps {
			if got := s.DependsOn[dep].Condition; got != cond {
				t.Errorf("%s depends on %s with condition %q, want %q", name, dep, got, cond)
			}
		}
	}
}

func TestEnvironmentIsKnownToEachService(t *testing.T) {
	p, root := load(t)
	for name, binary := range map[string]string{"account": "account", "provision": "account", "conversations": "conversations"} {
		known, err := servicecfg.EnvVars(root, binary)
		if err != nil {
			t.Fatal(err)
		}
		s := service(t, p, name)
		if len(s.Environment) == 0 {
			t.Errorf("%s sets no environment", name)
		}
		for key := range s.Environment {
			if _, ok := known[key]; !ok {
				t.Errorf("%s sets %s, which the %s binary does not read", name, key, binary)
			}
		}
	}
	account, conv := service(t, p, "account"), service(t, p, "conversations")
	if env(conv, "CONVERSATIONS_ISSUER") != env(account, "ACCOUNT_ISSUER") || env(account, "ACCOUNT_ISSUER") == "" {
		t.Errorf("conversations trusts issuer %q, account issues %q", env(conv, "CONVERSATIONS_ISSUER"), env(account, "ACCOUNT_ISSUER"))
	}
	jwks, err := url.Parse(env(conv, "CONVERSATIONS_JWKS_URL"))
	if err != nil || jwks.Hostname() != "account" || jwks.Port() != "8080" || jwks.Path != "/.well-known/jwks.json" {
		t.Errorf("conversations JWKS URL %q does not reach the account service by name", env(conv, "CONVERSATIONS_JWKS_URL"))
	}
	for _, s := range []types.ServiceConfig{account, service(t, p, "provision")} {
		if env(s, "ACCOUNT_MONGODB_URI") != "mongodb://mongodb:27017/" {
			t.Errorf("%s MongoDB URI = %q", s.Name, env(s, "ACCOUNT_MONGODB_URI"))
		}
	}
}

func TestProvisionIsAOneShotOfTheAccountImage(t *testing.T) {
	p, root := load(t)
	prov, account := service(t, p, "provision"), service(t, p, "account")
	if prov.Image != account.Image {
		t.Errorf("provision runs %q, not the account image %q", prov.Image, account.Image)
	}
	if prov.Restart != "no" {
		t.Errorf("provision restart = %q, want no", prov.Restart)
	}
	cmd := []string(prov.Command)
	if len(cmd) != 3 || cmd[0] != "provision" || cmd[1] != "--file" {
		t.Fatalf("provision command = %v", cmd)
	}
	// The file it names must exist on the host through its bind mount.
	found := false
	for _, v := range prov.Volumes {
		if rel, ok := strings.CutPrefix(cmd[2], v.Target+"/"); ok && v.Type == types.VolumeTypeBind && v.ReadOnly {
			if _, err := os.Stat(filepath.Join(v.Source, rel)); err != nil {
				t.Errorf("provision file %s is not at %s: %v", cmd[2], v.Source, err)
			}
			if !strings.HasPrefix(v.Source, root) {
				t.Errorf("provision mounts %s from outside the repository", v.Source)
			}
			found = true
		}
	}
	if !found {
		t.Errorf("provision file %s is not on a read-only bind mount", cmd[2])
	}
}
