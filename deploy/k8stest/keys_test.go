package k8stest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	signingKeysSecret = "account-signing-keys"
	signingKeysDir    = "/etc/account/keys"
)

// TestAccountSigningKeys: in the base, ACCOUNT_KEY_FILES names files of the
// Secret account-signing-keys, mounted read-only (and not world-readable)
// at /etc/account/keys. In dev, ACCOUNT_KEY_FILES is empty (the key lives
// in MongoDB) and neither the volume nor the mount is left, since that
// Secret does not exist there.
func TestAccountSigningKeys(t *testing.T) {
	wantFiles := map[string]bool{baseDir: true, devDir: false}
	for _, dir := range kustomizations {
		t.Run(buildName(dir), func(t *testing.T) {
			b := kustomize(t, dir)
			d, c := deployment(t, b, account)
			value, set, _ := env(t, b, c, "ACCOUNT_KEY_FILES")
			var files []string
			for _, f := range strings.Split(value, ",") {
				if f = strings.TrimSpace(f); f != "" {
					files = append(files, f)
				}
			}

			var volume *corev1.Volume
			for i, v := range d.Spec.Template.Spec.Volumes {
				if v.Secret != nil && v.Secret.SecretName == signingKeysSecret {
					volume = &d.Spec.Template.Spec.Volumes[i]
				}
			}
			var mounts []corev1.VolumeMount
			for _, m := range c.VolumeMounts {
				if (volume != nil && m.Name == volume.Name) || m.MountPath == signingKeysDir {
					mounts = append(mounts, m)
				}
			}

			if !wantFiles[dir] {
				if !set || len(files) > 0 {
					t.Errorf("ACCOUNT_KEY_FILES %q (set: %v), want set to \"\" (keys in MongoDB)", value, set)
				}
				if volume != nil {
					t.Errorf("volume %s of Secret %s still present", volume.Name, signingKeysSecret)
				}
				if len(mounts) > 0 {
					t.Errorf("mounts %+v still present", mounts)
				}
				if _, ok := b.Secrets[signingKeysSecret]; ok {
					t.Errorf("Secret %s is in the build", signingKeysSecret)
				}
				return
			}

			if len(files) == 0 {
				t.Fatalf("ACCOUNT_KEY_FILES %q names no files", value)
			}
			if volume == nil {
				t.Fatalf("no volume of Secret %s", signingKeysSecret)
			}
			if o := volume.Secret.Optional; o != nil && *o {
				t.Error("the signing-keys Secret is optional: without it the pods would fail on missing key files instead of waiting for the Secret")
			}
			if m := volume.Secret.DefaultMode; m == nil || *m != 0o440 {
				t.Errorf("defaultMode %s, want 0440: read-only, readable through fsGroup, not by others", fmtMode(m))
			}
			if len(volume.Secret.Items) > 0 {
				t.Errorf("items %+v: mount the whole Secret so that added key files appear", volume.Secret.Items)
			}
			if len(mounts) != 1 {
				t.Fatalf("mounts of the signing keys %+v, want one", mounts)
			}
			m := mounts[0]
			if m.Name != volume.Name || m.MountPath != signingKeysDir || !m.ReadOnly || m.SubPath != "" {
				t.Errorf("mount %+v, want volume %s at %s, readOnly, no subPath (subPath mounts never see Secret updates)", m, volume.Name, signingKeysDir)
			}
			for _, f := range files {
				if path.Dir(f) != signingKeysDir {
					t.Errorf("ACCOUNT_KEY_FILES entry %q is not a file in %s", f, signingKeysDir)
				}
			}
		})
	}
}

func fmtMode(m *int32) string {
	if m == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%#o", *m)
}

// privateKeyMarkers are what a real private key would contain: a PEM
// block, or a JWK's private exponent or scalar "d".
var privateKeyMarkers = regexp.MustCompile(`PRIVATE KEY|"d"\s*:`)

// TestSigningKeysExampleIsOnlyAnExample: the example Secret decodes strictly
// as the Secret the Deployment mounts, holds a placeholder rather than a
// key, is listed in no kustomization and so appears in no build.
func TestSigningKeysExampleIsOnlyAnExample(t *testing.T) {
	raw, err := os.ReadFile(exampleKey)
	if err != nil {
		t.Fatal(err)
	}
	if loc := privateKeyMarkers.FindIndex(raw); loc != nil {
		t.Errorf("%s contains %q: never commit a private key", exampleKey, raw[loc[0]:loc[1]])
	}
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		t.Fatalf("%s: %v", exampleKey, err)
	}
	var secret corev1.Secret
	if err := decodeStrict(js, &secret); err != nil {
		t.Fatalf("%s: %v", exampleKey, err)
	}
	if secret.APIVersion != "v1" || secret.Kind != "Secret" || secret.Name != signingKeysSecret {
		t.Errorf("%s is %s %s %q, want v1 Secret %q", exampleKey, secret.APIVersion, secret.Kind, secret.Name, signingKeysSecret)
	}
	values := map[string][]byte{}
	for k, v := range secret.StringData {
		values[k] = []byte(v)
	}
	for k, v := range secret.Data {
		values[k] = v
	}
	if _, ok := values["signing.jwk"]; !ok {
		t.Errorf("%s has no key signing.jwk (the file ACCOUNT_KEY_FILES names)", exampleKey)
	}
	for k, v := range values {
		if privateKeyMarkers.Match(v) {
			t.Errorf("%s: %s looks like a private key", exampleKey, k)
		}
		var jwk map[string]any
		if json.Unmarshal(v, &jwk) == nil {
			t.Errorf("%s: %s is a JSON object (a JWK?), want an obvious placeholder", exampleKey, k)
		}
		if !bytes.Contains(bytes.ToUpper(v), []byte("REPLACE")) {
			t.Errorf("%s: %s = %q does not read as a placeholder (REPLACE...)", exampleKey, k, v)
		}
	}

	for file, k := range kustomizationFiles(t) {
		for _, ref := range k.references(file) {
			if sameFile(t, ref, exampleKey) {
				t.Errorf("%s lists %s: the example must never be applied", file, exampleKey)
			}
		}
	}
	for _, dir := range kustomizations {
		b := kustomize(t, dir)
		if _, ok := b.Secrets[signingKeysSecret]; ok {
			t.Errorf("%s: the build contains Secret %s", dir, signingKeysSecret)
		}
		for _, o := range b.Objects {
			for _, v := range values {
				if bytes.Contains(o.JSON, v) {
					t.Errorf("%s: %s contains the example's placeholder", dir, o)
				}
			}
			if privateKeyMarkers.Match(o.JSON) {
				t.Errorf("%s: %s contains private key material", dir, o)
			}
		}
	}
}
