package k8stest

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Paths, relative to this package's directory (where `go test` runs).
const (
	k8sDir     = "../k8s"
	baseDir    = k8sDir + "/base"
	devDir     = k8sDir + "/overlays/dev"
	exampleKey = baseDir + "/account/signing-keys.example.yaml"

	accountConfigGo       = "../../services/account/cmd/account/config.go"
	conversationsConfigGo = "../../services/conversations/cmd/conversations/config.go"
)

// kustomizations are every buildable kustomization: the base and each
// overlay. Every test that checks "each build" walks this list.
var kustomizations = []string{baseDir, devDir}

// object is one resource of a build: its identity and its JSON.
type object struct {
	APIVersion, Kind, Namespace, Name string
	Labels                            map[string]string
	JSON                              []byte
}

func (o object) String() string {
	return fmt.Sprintf("%s %s %s/%s", o.APIVersion, o.Kind, o.Namespace, o.Name)
}

// build is the output of one kustomization, every object decoded strictly
// into its API type, indexed by name.
type build struct {
	Dir          string
	Objects      []object
	Deployments  map[string]*appsv1.Deployment
	StatefulSets map[string]*appsv1.StatefulSet
	Services     map[string]*corev1.Service
	ConfigMaps   map[string]*corev1.ConfigMap
	Secrets      map[string]*corev1.Secret
	PDBs         map[string]*policyv1.PodDisruptionBudget
	HPAs         map[string]*autoscalingv2.HorizontalPodAutoscaler
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*buildResult{}
)

type buildResult struct {
	b    *build
	errs []error
}

// kustomize builds dir once per test binary and stops the test when the
// build or the strict decoding of any object failed, listing every problem.
func kustomize(t *testing.T, dir string) *build {
	t.Helper()
	buildsMu.Lock()
	r, ok := builds[dir]
	if !ok {
		b, errs := runKustomize(dir)
		r = &buildResult{b, errs}
		builds[dir] = r
	}
	buildsMu.Unlock()
	if len(r.errs) > 0 {
		for _, err := range r.errs {
			t.Errorf("%s: %v", dir, err)
		}
		t.FailNow()
	}
	return r.b
}

// TestKustomizationsBuildAndDecodeStrictly: every kustomization builds (as
// `kubectl apply -k` would build it) and each object decodes strictly into
// its Kubernetes API type. The other tests then check the objects.
func TestKustomizationsBuildAndDecodeStrictly(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(buildName(dir), func(t *testing.T) {
			b := kustomize(t, dir)
			if len(b.Objects) == 0 {
				t.Error("the build holds no objects")
			}
		})
	}
}

// runKustomize is `kustomize build dir` followed by strict decoding. It
// returns every problem found, not only the first.
func runKustomize(dir string) (*build, []error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, []error{err}
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		return nil, []error{fmt.Errorf("kustomize build: %w", err)}
	}
	b := &build{
		Dir:          dir,
		Deployments:  map[string]*appsv1.Deployment{},
		StatefulSets: map[string]*appsv1.StatefulSet{},
		Services:     map[string]*corev1.Service{},
		ConfigMaps:   map[string]*corev1.ConfigMap{},
		Secrets:      map[string]*corev1.Secret{},
		PDBs:         map[string]*policyv1.PodDisruptionBudget{},
		HPAs:         map[string]*autoscalingv2.HorizontalPodAutoscaler{},
	}
	var errs []error
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", r.GetKind(), r.GetName(), err))
			continue
		}
		o := object{
			APIVersion: r.GetApiVersion(),
			Kind:       r.GetKind(),
			Namespace:  r.GetNamespace(),
			Name:       r.GetName(),
			Labels:     r.GetLabels(),
			JSON:       data,
		}
		b.Objects = append(b.Objects, o)
		if err := b.add(o); err != nil {
			errs = append(errs, err)
		}
	}
	return b, errs
}

// add decodes o into the API type of its apiVersion and kind. An unexpected
// kind (or a kind in an unexpected API version) is an error, and so is a
// field the type does not have, a misspelled or wrongly cased field, and a
// field given twice.
func (b *build) add(o object) error {
	switch o.APIVersion + " " + o.Kind {
	case "apps/v1 Deployment":
		return decodeInto(o, b.Deployments, &appsv1.Deployment{})
	case "apps/v1 StatefulSet":
		return decodeInto(o, b.StatefulSets, &appsv1.StatefulSet{})
	case "v1 Service":
		return decodeInto(o, b.Services, &corev1.Service{})
	case "v1 ConfigMap":
		return decodeInto(o, b.ConfigMaps, &corev1.ConfigMap{})
	case "v1 Secret":
		return decodeInto(o, b.Secrets, &corev1.Secret{})
	case "policy/v1 PodDisruptionBudget":
		return decodeInto(o, b.PDBs, &policyv1.PodDisruptionBudget{})
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return decodeInto(o, b.HPAs, &autoscalingv2.HorizontalPodAutoscaler{})
	}
	return fmt.Errorf("%s: unexpected kind; the tests know Deployment, StatefulSet, Service, ConfigMap, Secret, PodDisruptionBudget and HorizontalPodAutoscaler (extend build.add and the tests for another)", o)
}

func decodeInto[T any](o object, into map[string]*T, v *T) error {
	if err := decodeStrict(o.JSON, v); err != nil {
		return fmt.Errorf("%s: %w", o, err)
	}
	if _, dup := into[o.Name]; dup {
		return fmt.Errorf("%s: two objects of this kind with this name", o)
	}
	into[o.Name] = v
	return nil
}

// decodeStrict decodes JSON as the Kubernetes API server does in strict
// field validation: field names are case-sensitive, and unknown or
// duplicate fields are errors.
func decodeStrict(data []byte, v any) error {
	strictErrs, err := sigsjson.UnmarshalStrict(data, v,
		sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			msgs[i] = e.Error()
		}
		sort.Strings(msgs)
		return fmt.Errorf("strict decoding: %s", strings.Join(msgs, "; "))
	}
	return nil
}

// TestStrictDecodingRejectsUnknownFields guards the guard: decodeStrict
// must reject what the API server's strict validation rejects.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	bad := map[string]string{
		"misspelled":   `{"spec":{"replicas":2,"template":{"spec":{"containers":[{"name":"x","readinesProbe":{}}]}}}}`,
		"wrong case":   `{"spec":{"Replicas":2}}`,
		"unknown top":  `{"specs":{}}`,
		"duplicate":    `{"spec":{"replicas":2,"replicas":3}}`,
		"wrong type":   `{"spec":{"replicas":"2"}}`,
		"nested wrong": `{"spec":{"template":{"spec":{"securityContext":{"runAsNonroot":true}}}}}`,
	}
	for name, data := range bad {
		if err := decodeStrict([]byte(data), &appsv1.Deployment{}); err == nil {
			t.Errorf("%s: %s decoded without an error", name, data)
		}
	}
	if err := decodeStrict([]byte(`{"spec":{"replicas":2}}`), &appsv1.Deployment{}); err != nil {
		t.Errorf("a valid Deployment: %v", err)
	}
}
