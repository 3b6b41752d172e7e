package k8stest

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// secretVariables must never be in a ConfigMap: they may hold credentials
// or keys.
var secretVariables = []string{"ACCOUNT_MONGODB_URI", "CONVERSATIONS_MONGODB_URI", "CONVERSATIONS_CURSOR_SECRET"}

// TestConfigMapKeysAreServiceVariables: every key of a service's ConfigMap,
// and every variable set on its container, is a field of that service's
// config struct (parsed from config.go), so a misspelled or removed variable
// fails here instead of being ignored silently by envconfig.
func TestConfigMapKeysAreServiceVariables(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		_, c := deployment(t, b, s)
		vars := serviceEnv(t, s.ConfigGo)
		cm, ok := b.ConfigMaps[s.ConfigMap]
		if !ok {
			t.Fatalf("no ConfigMap %q", s.ConfigMap)
		}
		if len(cm.BinaryData) > 0 {
			t.Errorf("ConfigMap %s has binaryData", cm.Name)
		}
		for key := range cm.Data {
			if _, ok := vars[key]; !ok {
				t.Errorf("ConfigMap %s: %s is not a variable of %s (see %s)", cm.Name, key, s.Name, s.ConfigGo)
			}
			if slices.Contains(secretVariables, key) {
				t.Errorf("ConfigMap %s: %s belongs in a Secret", cm.Name, key)
			}
		}
		usesConfigMap := false
		for _, src := range c.EnvFrom {
			switch {
			case src.ConfigMapRef != nil && src.ConfigMapRef.Name == s.ConfigMap && src.Prefix == "":
				usesConfigMap = true
			default:
				t.Errorf("unexpected envFrom %+v", src)
			}
		}
		if !usesConfigMap {
			t.Errorf("the container does not take its environment from ConfigMap %s", s.ConfigMap)
		}
		for _, e := range c.Env {
			if _, ok := vars[e.Name]; !ok && e.Name != "GOMAXPROCS" {
				t.Errorf("env %s is not a variable of %s", e.Name, s.Name)
			}
			if slices.Contains(secretVariables, e.Name) && e.Value != "" {
				t.Errorf("env %s has a literal value; it belongs in a Secret", e.Name)
			}
		}
	})
}

// TestMongoDBURIFromSecret: the MongoDB URI comes from key `uri` of the
// service's Secret; where the build generates that Secret (dev), the
// reference points at it (kustomize appends a hash to the name) and it has
// the key.
func TestMongoDBURIFromSecret(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		_, c := deployment(t, b, s)
		variable := strings.ToUpper(s.Name) + "_MONGODB_URI"
		var ref *corev1.SecretKeySelector
		for _, e := range c.Env {
			if e.Name == variable && e.ValueFrom != nil {
				ref = e.ValueFrom.SecretKeyRef
			}
		}
		if ref == nil {
			t.Fatalf("%s is not set from a secretKeyRef", variable)
		}
		if ref.Key != "uri" {
			t.Errorf("%s: key %q, want uri", variable, ref.Key)
		}
		if ref.Optional != nil && *ref.Optional {
			t.Errorf("%s: optional; a missing Secret must stop the pod, not start it against localhost", variable)
		}
		generated := false
		for name := range b.Secrets {
			if strings.HasPrefix(name, s.MongoSecret+"-") {
				generated = true
			}
		}
		if !generated {
			if ref.Name != s.MongoSecret {
				t.Errorf("%s: Secret %q, want %q", variable, ref.Name, s.MongoSecret)
			}
			return
		}
		secret, ok := b.Secrets[ref.Name]
		if !ok || !strings.HasPrefix(ref.Name, s.MongoSecret+"-") {
			t.Fatalf("%s: Secret %q is not the build's generated %s-<hash>", variable, ref.Name, s.MongoSecret)
		}
		if _, ok := secret.Data["uri"]; !ok {
			t.Errorf("Secret %s has no key uri", secret.Name)
		}
	})
}

// TestConversationsTrustsAccount: conversations fetches the JWKS from the
// account Service by its name and http port, and trusts exactly the issuer
// the account service puts in its tokens, for an audience it issues.
func TestConversationsTrustsAccount(t *testing.T) {
	forEachBuild(t, func(t *testing.T, b *build) {
		_, ac := deployment(t, b, account)
		_, cc := deployment(t, b, conversations)
		accountVars := serviceEnv(t, account.ConfigGo)
		conversationsVars := serviceEnv(t, conversations.ConfigGo)

		raw := envOrDefault(t, b, cc, conversationsVars, "CONVERSATIONS_JWKS_URL")
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("CONVERSATIONS_JWKS_URL %q: %v", raw, err)
		}
		service, ok := b.Services[account.Name]
		if !ok {
			t.Fatal("no account Service")
		}
		// The Service's name, or its in-cluster DNS names.
		host := u.Hostname()
		if host != service.Name && !strings.HasPrefix(host, service.Name+".") {
			t.Errorf("CONVERSATIONS_JWKS_URL host %q is not the account Service %q", host, service.Name)
		}
		var httpPort int32
		for _, p := range service.Spec.Ports {
			if p.Name == "http" {
				httpPort = p.Port
			}
		}
		if u.Scheme != "http" || u.Port() != strconv.Itoa(int(httpPort)) || u.Path != "/.well-known/jwks.json" {
			t.Errorf("CONVERSATIONS_JWKS_URL %q, want http://%s:%d/.well-known/jwks.json", raw, service.Name, httpPort)
		}

		issuer := envOrDefault(t, b, ac, accountVars, "ACCOUNT_ISSUER")
		if got := envOrDefault(t, b, cc, conversationsVars, "CONVERSATIONS_ISSUER"); got != issuer {
			t.Errorf("CONVERSATIONS_ISSUER %q, want ACCOUNT_ISSUER %q", got, issuer)
		}
		issued := strings.Split(envOrDefault(t, b, ac, accountVars, "ACCOUNT_AUDIENCE"), ",")
		accepted := strings.Split(envOrDefault(t, b, cc, conversationsVars, "CONVERSATIONS_AUDIENCE"), ",")
		if !slices.ContainsFunc(accepted, func(a string) bool { return slices.Contains(issued, a) }) {
			t.Errorf("CONVERSATIONS_AUDIENCE %q accepts none of ACCOUNT_AUDIENCE %q", accepted, issued)
		}
	})
}

// TestImages: the base names the repositories without a tag; the dev
// overlay tags both `dev`.
func TestImages(t *testing.T) {
	want := map[string]string{baseDir: "", devDir: ":dev"}
	forEach(t, func(t *testing.T, b *build, s svc) {
		_, c := deployment(t, b, s)
		if w := s.Image + want[b.Dir]; c.Image != w {
			t.Errorf("image %q, want %q", c.Image, w)
		}
		if len(c.Command) > 0 || len(c.Args) > 0 {
			t.Errorf("command %q args %q: the image's ENTRYPOINT serves by default", c.Command, c.Args)
		}
	})
}
