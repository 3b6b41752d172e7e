package k8stest

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const devNamespace = "acme-dev"

// TestDevOverlayNamespaceAndLogLevel: every object of the dev build is in
// acme-dev (the base sets no namespace), and both services log at debug.
func TestDevOverlayNamespaceAndLogLevel(t *testing.T) {
	for _, o := range kustomize(t, baseDir).Objects {
		if o.Namespace != "" {
			t.Errorf("base: %s has a namespace; overlays choose it", o)
		}
	}
	b := kustomize(t, devDir)
	for _, o := range b.Objects {
		if o.Namespace != devNamespace {
			t.Errorf("dev: %s is not in namespace %s", o, devNamespace)
		}
	}
	for _, s := range ourServices {
		_, c := deployment(t, b, s)
		variable := strings.ToUpper(s.Name) + "_LOG_LEVEL"
		if v, _, _ := env(t, b, c, variable); v != "debug" {
			t.Errorf("dev: %s=%q, want debug", variable, v)
		}
	}
}

// TestDevMongoDB: dev runs one MongoDB (official image mongo:8) as a
// StatefulSet with a volume claim, behind a headless Service `mongodb`, ready
// when mongosh's ping answers, as the image's non-root user; the generated
// URI Secrets point at that Service's name and port.
func TestDevMongoDB(t *testing.T) {
	b := kustomize(t, devDir)
	sts, ok := b.StatefulSets["mongodb"]
	if !ok {
		t.Fatal("no StatefulSet mongodb")
	}
	service, ok := b.Services["mongodb"]
	if !ok {
		t.Fatal("no Service mongodb")
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 1 {
		t.Errorf("replicas %s, want 1", deref(sts.Spec.Replicas))
	}
	if sts.Spec.ServiceName != service.Name {
		t.Errorf("serviceName %q, want the headless Service %q", sts.Spec.ServiceName, service.Name)
	}
	if service.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service mongodb clusterIP %q, want None (headless)", service.Spec.ClusterIP)
	}
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil || sts.Spec.Selector == nil || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("StatefulSet selector %v does not match its pods %v (%v)", sts.Spec.Selector, sts.Spec.Template.Labels, err)
	}
	if got := selects(b, labels.SelectorFromSet(service.Spec.Selector)); len(service.Spec.Selector) == 0 || !slices.Equal(got, []string{"StatefulSet/mongodb"}) {
		t.Errorf("Service mongodb selects %v, want only StatefulSet/mongodb", got)
	}

	pod := sts.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != "mongo:8" {
		t.Errorf("image %q, want mongo:8", c.Image)
	}
	port, _ := containerPort(&c, "mongodb")
	if port != 27017 {
		t.Errorf("container port mongodb %d, want 27017", port)
	}
	if p := c.ReadinessProbe; p == nil || p.Exec == nil ||
		!slices.Equal(p.Exec.Command, []string{"mongosh", "--quiet", "--eval", "db.adminCommand('ping')"}) {
		t.Errorf("readiness probe %+v, want exec mongosh --quiet --eval \"db.adminCommand('ping')\"", p)
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 999 ||
		psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod securityContext %+v, want runAsNonRoot as the image's mongodb user 999", psc)
	}
	if csc := c.SecurityContext; csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v, want no privilege escalation and all capabilities dropped", csc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not false")
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	}
	claims := map[string]bool{}
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		if _, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
			t.Errorf("volume claim %s requests no storage", pvc.Name)
		}
		claims[pvc.Name] = true
	}
	dataMounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/data/db" && claims[m.Name] {
			dataMounted = true
		}
	}
	if !dataMounted {
		t.Error("/data/db is not on a volume claim")
	}

	var servicePort int32
	for _, p := range service.Spec.Ports {
		servicePort = p.Port
	}
	for _, s := range ourServices {
		_, dc := deployment(t, b, s)
		var ref *corev1.SecretKeySelector
		for _, e := range dc.Env {
			if e.Name == strings.ToUpper(s.Name)+"_MONGODB_URI" && e.ValueFrom != nil {
				ref = e.ValueFrom.SecretKeyRef
			}
		}
		if ref == nil {
			t.Errorf("%s: no MongoDB URI from a Secret", s.Name)
			continue
		}
		secret, ok := b.Secrets[ref.Name]
		if !ok {
			t.Errorf("%s: Secret %q is not in the dev build", s.Name, ref.Name)
			continue
		}
		raw := string(secret.Data[ref.Key])
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "mongodb" || u.Hostname() != service.Name || u.Port() != strconv.Itoa(int(servicePort)) {
			t.Errorf("%s: URI %q, want mongodb://%s:%d/ (%v)", s.Name, raw, service.Name, servicePort, err)
		}
	}
}
