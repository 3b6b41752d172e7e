package k8stest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// kustomization is one kustomization.yaml of deploy/k8s.
type kustomization struct{ types.Kustomization }

// deprecatedKustomizationFields are refused, so that references() need
// only follow the current fields.
var deprecatedKustomizationFields = []string{
	"bases", "commonLabels", "imageTags", "patchesJson6902", "patchesStrategicMerge", "vars",
}

// kustomizationFiles reads every kustomization.yaml under deploy/k8s,
// keyed by path.
func kustomizationFiles(t *testing.T) map[string]kustomization {
	t.Helper()
	out := map[string]kustomization{}
	err := filepath.WalkDir(k8sDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !isKustomizationFile(d.Name()) {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var k kustomization
		if err := yaml.UnmarshalStrict(data, &k.Kustomization); err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		var fields map[string]any
		if err := yaml.Unmarshal(data, &fields); err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		for _, f := range deprecatedKustomizationFields {
			if _, ok := fields[f]; ok {
				t.Errorf("%s: %s is deprecated in kustomize v5 (use resources, labels, patches or replacements)", p, f)
			}
		}
		out[p] = k
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no kustomization.yaml under %s", k8sDir)
	}
	return out
}

func isKustomizationFile(name string) bool {
	return name == "kustomization.yaml" || name == "kustomization.yml" || name == "Kustomization"
}

// references returns the paths (relative to this package) of every file or
// directory the kustomization at file refers to.
func (k kustomization) references(file string) []string {
	var refs []string
	refs = append(refs, k.Resources...)
	refs = append(refs, k.Components...)
	refs = append(refs, k.Crds...)
	refs = append(refs, k.Generators...)
	refs = append(refs, k.Transformers...)
	refs = append(refs, k.Validators...)
	for _, p := range k.Patches {
		refs = append(refs, p.Path)
	}
	for _, r := range k.Replacements {
		refs = append(refs, r.Path)
	}
	sources := func(s types.KvPairSources) {
		for _, f := range s.FileSources {
			if _, p, ok := strings.Cut(f, "="); ok {
				f = p
			}
			refs = append(refs, f)
		}
		refs = append(refs, s.EnvSources...)
	}
	for _, g := range k.ConfigMapGenerator {
		sources(g.KvPairSources)
	}
	for _, g := range k.SecretGenerator {
		sources(g.KvPairSources)
	}
	var out []string
	for _, r := range refs {
		if r != "" && !strings.Contains(r, "://") {
			out = append(out, filepath.Join(filepath.Dir(file), r))
		}
	}
	return out
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	ia, errA := os.Stat(a)
	ib, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(ia, ib)
}

// TestEveryManifestFileIsUsed: each YAML file under deploy/k8s is a
// kustomization, an *.example.yaml, or referenced by a kustomization (as a
// resource, a patch, ...): a manifest forgotten in its kustomization.yaml
// would otherwise silently not be deployed. Every reference exists.
func TestEveryManifestFileIsUsed(t *testing.T) {
	used := map[string]bool{}
	for file, k := range kustomizationFiles(t) {
		for _, ref := range k.references(file) {
			info, err := os.Stat(ref)
			if err != nil {
				t.Errorf("%s refers to %s: %v", file, ref, err)
				continue
			}
			if info.IsDir() {
				found := false
				for _, name := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
					if _, err := os.Stat(filepath.Join(ref, name)); err == nil {
						found = true
					}
				}
				if !found {
					t.Errorf("%s refers to directory %s, which has no kustomization", file, ref)
				}
			}
			used[filepath.Clean(ref)] = true
		}
	}
	err := filepath.WalkDir(k8sDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml") {
			return nil
		}
		if isKustomizationFile(name) || strings.HasSuffix(name, ".example.yaml") {
			return nil
		}
		if !used[filepath.Clean(p)] {
			t.Errorf("%s is listed in no kustomization: add it to resources or patches, or name it *.example.yaml", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEveryKustomizationIsTested: each overlay directory is in the
// kustomizations list, so that a new overlay (say overlays/prod) is built
// and checked here too, with its own expectations added to the tests.
func TestEveryKustomizationIsTested(t *testing.T) {
	for file := range kustomizationFiles(t) {
		dir := filepath.Dir(file)
		rel, err := filepath.Rel(k8sDir, dir)
		if err != nil {
			t.Fatal(err)
		}
		top := strings.Split(filepath.ToSlash(rel), "/")
		if top[0] != "overlays" && rel != "base" {
			continue // the base's parts are built through the base
		}
		tested := false
		for _, k := range kustomizations {
			if sameFile(t, k, dir) {
				tested = true
			}
		}
		if !tested {
			t.Errorf("%s is not in the kustomizations list of the tests: add it, with what it must produce", dir)
		}
	}
}
