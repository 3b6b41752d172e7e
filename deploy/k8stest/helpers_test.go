package k8stest

import (
	"github.com/acme/platform/deploy/internal/servicecfg"

	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// svc describes one of our services as the manifests must deploy it.
type svc struct {
	Name        string // Deployment, Service, PDB, HPA and container name
	ConfigMap   string // its envFrom ConfigMap
	ConfigGo    string // its config.go
	MongoSecret string // the Secret holding its MongoDB URI (key `uri`)
	Image       string // repository, without tag
	HTTPPort    int32
	OpsPort     int32
	Requests    corev1.ResourceList
	Limits      corev1.ResourceList
}

const (
	nameLabel   = "app.kubernetes.io/name"
	partOfLabel = "app.kubernetes.io/part-of"
	partOf      = "acme-platform"
	runAsID     = 65532 // distroless nonroot
)

var (
	account = svc{
		Name:        "account",
		ConfigMap:   "account-config",
		ConfigGo:    accountConfigGo,
		MongoSecret: "account-mongodb",
		Image:       "acme/account",
		HTTPPort:    8080,
		OpsPort:     9090,
		Requests:    resources("250m", "128Mi"),
		Limits:      resources("1", "256Mi"),
	}
	conversations = svc{
		Name:        "conversations",
		ConfigMap:   "conversations-config",
		ConfigGo:    conversationsConfigGo,
		MongoSecret: "conversations-mongodb",
		Image:       "acme/conversations",
		HTTPPort:    8081,
		OpsPort:     9091,
		Requests:    resources("100m", "64Mi"),
		Limits:      resources("500m", "128Mi"),
	}
	ourServices = []svc{account, conversations}
)

func resources(cpu, memory string) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
	}
}

// forEach runs f as a subtest for every build and every one of our
// services, named like "base/account".
func forEach(t *testing.T, f func(t *testing.T, b *build, s svc)) {
	for _, dir := range kustomizations {
		for _, s := range ourServices {
			t.Run(buildName(dir)+"/"+s.Name, func(t *testing.T) {
				f(t, kustomize(t, dir), s)
			})
		}
	}
}

func forEachBuild(t *testing.T, f func(t *testing.T, b *build)) {
	for _, dir := range kustomizations {
		t.Run(buildName(dir), func(t *testing.T) { f(t, kustomize(t, dir)) })
	}
}

// buildName is "base" or "dev" (the overlay's directory name).
func buildName(dir string) string {
	return dir[strings.LastIndex(dir, "/")+1:]
}

// deployment returns s's Deployment and its container.
func deployment(t *testing.T, b *build, s svc) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d, ok := b.Deployments[s.Name]
	if !ok {
		t.Fatalf("%s: no Deployment %q", b.Dir, s.Name)
	}
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == s.Name {
			return d, c
		}
	}
	t.Fatalf("Deployment %s: no container named %q", s.Name, s.Name)
	return nil, nil
}

// containerPort returns the number of the container port called name.
func containerPort(c *corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// resolvePort turns a probe's or Service's target port (a number or a
// container port name) into a number.
func resolvePort(c *corev1.Container, p intstr.IntOrString) (int32, error) {
	if p.Type == intstr.Int {
		return p.IntVal, nil
	}
	n, ok := containerPort(c, p.StrVal)
	if !ok {
		return 0, fmt.Errorf("container %s has no port named %q", c.Name, p.StrVal)
	}
	return n, nil
}

// env returns what the container gets for the variable name: a literal
// env entry, else its envFrom ConfigMaps (later ones win, env beats
// envFrom, as in the kubelet). A variable set from a Secret or a field
// reference is reported with fromRef.
func env(t *testing.T, b *build, c *corev1.Container, name string) (value string, set, fromRef bool) {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true, e.ValueFrom != nil
		}
	}
	for _, src := range c.EnvFrom {
		if src.ConfigMapRef == nil {
			continue
		}
		cm, ok := b.ConfigMaps[src.ConfigMapRef.Name]
		if !ok {
			t.Fatalf("container %s: envFrom ConfigMap %q is not in the build", c.Name, src.ConfigMapRef.Name)
		}
		if v, ok := cm.Data[strings.TrimPrefix(name, src.Prefix)]; ok && strings.HasPrefix(name, src.Prefix) {
			value, set = v, true
		}
	}
	return value, set, false
}

// envOrDefault is env, falling back to the binary's default.
func envOrDefault(t *testing.T, b *build, c *corev1.Container, vars map[string]servicecfg.Var, name string) string {
	t.Helper()
	if v, set, fromRef := env(t, b, c, name); set && !fromRef {
		return v
	}
	v, ok := vars[name]
	if !ok {
		t.Fatalf("%s is not a variable of the service", name)
	}
	return v.Default
}

// addrPort returns the port of a listen address like ":8080".
func addrPort(addr string) (int32, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(port, 10, 32)
	return int32(n), err
}

func duration(t *testing.T, name, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return d
}

// podTemplates returns the pod labels of every workload of the build,
// keyed by "Kind/name".
func podTemplates(b *build) map[string]labels.Set {
	out := map[string]labels.Set{}
	for name, d := range b.Deployments {
		out["Deployment/"+name] = d.Spec.Template.Labels
	}
	for name, s := range b.StatefulSets {
		out["StatefulSet/"+name] = s.Spec.Template.Labels
	}
	return out
}

// selects returns the workloads of b whose pods sel matches.
func selects(b *build, sel labels.Selector) []string {
	var out []string
	for w, l := range podTemplates(b) {
		if sel.Matches(l) {
			out = append(out, w)
		}
	}
	return out
}
