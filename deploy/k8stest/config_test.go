package k8stest

import (
	"testing"

	"github.com/acme/platform/deploy/internal/servicecfg"
)

// serviceEnv returns the variables the service whose config.go is at path
// reads (see servicecfg.EnvVarsOf).
func serviceEnv(t *testing.T, path string) map[string]servicecfg.Var {
	t.Helper()
	vars, err := servicecfg.EnvVarsOf(path)
	if err != nil {
		t.Fatal(err)
	}
	return vars
}

// TestServiceEnvParsesConfigStructs guards the parser: variables the
// README and the manifests rely on must come out of config.go, and a default
// must be read from its tag.
func TestServiceEnvParsesConfigStructs(t *testing.T) {
	for path, want := range map[string][]string{
		accountConfigGo: {
			"ACCOUNT_HTTP_ADDR", "ACCOUNT_OPS_ADDR", "ACCOUNT_MONGODB_URI", "ACCOUNT_ISSUER",
			"ACCOUNT_KEY_FILES", "ACCOUNT_ACTIVE_KEY_ID", "ACCOUNT_HASH_CONCURRENCY",
			"ACCOUNT_ARGON2_MEMORY_KIB", "ACCOUNT_SHUTDOWN_TIMEOUT",
		},
		conversationsConfigGo: {
			"CONVERSATIONS_HTTP_ADDR", "CONVERSATIONS_OPS_ADDR", "CONVERSATIONS_MONGODB_URI",
			"CONVERSATIONS_JWKS_URL", "CONVERSATIONS_ISSUER", "CONVERSATIONS_CURSOR_SECRET",
			"CONVERSATIONS_SHUTDOWN_TIMEOUT",
		},
	} {
		vars := serviceEnv(t, path)
		for _, name := range want {
			if _, ok := vars[name]; !ok {
				t.Errorf("%s: %s not found among %d variables", path, name, len(vars))
			}
		}
	}
	if got := serviceEnv(t, accountConfigGo)["ACCOUNT_OPS_ADDR"].Default; got != ":9090" {
		t.Errorf("ACCOUNT_OPS_ADDR default %q, want \":9090\"", got)
	}
}
