package k8stest

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestBuildsHoldExactlyTheExpectedObjects: each kustomization builds, every
// object decodes strictly into its API type (see build.add), and the set of
// objects is the expected one: nothing missing, nothing extra.
func TestBuildsHoldExactlyTheExpectedObjects(t *testing.T) {
	common := []string{
		"ConfigMap account-config", "ConfigMap conversations-config",
		"Deployment account", "Deployment conversations",
		"HorizontalPodAutoscaler account", "HorizontalPodAutoscaler conversations",
		"PodDisruptionBudget account", "PodDisruptionBudget conversations",
		"Service account", "Service conversations",
	}
	want := map[string][]string{
		baseDir: common,
		devDir: append(slices.Clone(common),
			// secretGenerator names end in -<hash>, shown here as -*.
			"Secret account-mongodb-*", "Secret conversations-mongodb-*",
			"Service mongodb", "StatefulSet mongodb"),
	}
	forEachBuild(t, func(t *testing.T, b *build) {
		var got []string
		for _, o := range b.Objects {
			name := o.Name
			if o.Kind == "Secret" {
				if i := strings.LastIndex(name, "-"); i > 0 && len(name)-i-1 == 10 {
					name = name[:i] + "-*"
				}
			}
			got = append(got, o.Kind+" "+name)
		}
		sort.Strings(got)
		w := slices.Clone(want[b.Dir])
		sort.Strings(w)
		if !slices.Equal(got, w) {
			t.Errorf("objects:\n got %q\nwant %q", got, w)
		}
	})
}

// TestObjectsCarryPlatformLabels: the base's `labels` put part-of on every
// object and pod template of the platform, and each of our objects names
// its service.
func TestObjectsCarryPlatformLabels(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		d, _ := deployment(t, b, s)
		check := func(what string, l map[string]string) {
			if l[partOfLabel] != partOf {
				t.Errorf("%s: label %s=%q, want %q", what, partOfLabel, l[partOfLabel], partOf)
			}
			if l[nameLabel] != s.Name {
				t.Errorf("%s: label %s=%q, want %q", what, nameLabel, l[nameLabel], s.Name)
			}
		}
		check("Deployment", d.Labels)
		check("pod template", d.Spec.Template.Labels)
		if o, ok := b.Services[s.Name]; ok {
			check("Service", o.Labels)
		}
		if o, ok := b.ConfigMaps[s.ConfigMap]; ok {
			check("ConfigMap", o.Labels)
		}
		if o, ok := b.PDBs[s.Name]; ok {
			check("PodDisruptionBudget", o.Labels)
		}
		if o, ok := b.HPAs[s.Name]; ok {
			check("HorizontalPodAutoscaler", o.Labels)
		}
	})
}

// TestDeploymentReplicasAndSelector: two replicas; the selector is the name
// label only (selectors are immutable: part-of must stay out of them) and
// matches the pods of this Deployment and of no other workload.
func TestDeploymentReplicasAndSelector(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		d, _ := deployment(t, b, s)
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("replicas %s, want 2", deref(d.Spec.Replicas))
		}
		want := &metav1.LabelSelector{MatchLabels: map[string]string{nameLabel: s.Name}}
		if d.Spec.Selector == nil || !slices.Equal(sortedKeys(d.Spec.Selector.MatchLabels), sortedKeys(want.MatchLabels)) ||
			d.Spec.Selector.MatchLabels[nameLabel] != s.Name || len(d.Spec.Selector.MatchExpressions) > 0 {
			t.Errorf("selector %v, want %v", d.Spec.Selector, want)
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			t.Fatalf("selector: %v", err)
		}
		if got := selects(b, sel); !slices.Equal(got, []string{"Deployment/" + s.Name}) {
			t.Errorf("selector %s matches the pods of %v, want only Deployment/%s", sel, got, s.Name)
		}
		if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
			t.Errorf("rolling update %+v, want maxUnavailable 0 (a new pod is ready before an old one goes)", ru)
		}
	})
}

// TestContainerPortsMatchListenAddresses: the ports named http and ops are
// the service's, and the ConfigMap's listen addresses agree with them.
func TestContainerPortsMatchListenAddresses(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		_, c := deployment(t, b, s)
		vars := serviceEnv(t, s.ConfigGo)
		prefix := strings.ToUpper(s.Name) + "_"
		for _, p := range []struct {
			name, variable string
			want           int32
		}{{"http", prefix + "HTTP_ADDR", s.HTTPPort}, {"ops", prefix + "OPS_ADDR", s.OpsPort}} {
			got, ok := containerPort(c, p.name)
			if !ok {
				t.Errorf("no container port named %q", p.name)
				continue
			}
			if got != p.want {
				t.Errorf("container port %s = %d, want %d", p.name, got, p.want)
			}
			addr := envOrDefault(t, b, c, vars, p.variable)
			listen, err := addrPort(addr)
			if err != nil || listen != got {
				t.Errorf("%s=%q listens elsewhere than container port %s (%d)", p.variable, addr, p.name, got)
			}
		}
	})
}

// TestProbesUseOpsEndpoints: readiness is GET /readyz and liveness GET
// /healthz, both on the ops port; a startup probe, when present, is on the
// ops port too. The image has no shell, so no probe or hook may exec.
func TestProbesUseOpsEndpoints(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		_, c := deployment(t, b, s)
		checkHTTP := func(what string, p *corev1.Probe, path string) {
			if p == nil {
				t.Errorf("no %s probe", what)
				return
			}
			if p.HTTPGet == nil {
				t.Errorf("%s probe is not httpGet", what)
				return
			}
			if path != "" && p.HTTPGet.Path != path {
				t.Errorf("%s probe path %q, want %q", what, p.HTTPGet.Path, path)
			}
			port, err := resolvePort(c, p.HTTPGet.Port)
			if err != nil || port != s.OpsPort {
				t.Errorf("%s probe port %s (%d, %v), want the ops port %d", what, p.HTTPGet.Port.String(), port, err, s.OpsPort)
			}
			if p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP {
				t.Errorf("%s probe scheme %s, want HTTP", what, p.HTTPGet.Scheme)
			}
			if p.PeriodSeconds <= 0 || p.TimeoutSeconds <= 0 || p.FailureThreshold <= 0 {
				t.Errorf("%s probe: set periodSeconds, timeoutSeconds and failureThreshold explicitly (%d, %d, %d)",
					what, p.PeriodSeconds, p.TimeoutSeconds, p.FailureThreshold)
			}
		}
		checkHTTP("readiness", c.ReadinessProbe, "/readyz")
		checkHTTP("liveness", c.LivenessProbe, "/healthz")
		if c.StartupProbe != nil {
			checkHTTP("startup", c.StartupProbe, "/healthz")
		}
		// /readyz bounds its own checks to 2 s: a shorter timeout would turn
		// a slow MongoDB into a flapping probe.
		if p := c.ReadinessProbe; p != nil && p.TimeoutSeconds <= 2 {
			t.Errorf("readiness timeoutSeconds %d, want more than /readyz's own 2 s", p.TimeoutSeconds)
		}
		// Liveness must tolerate a few missed answers before a restart.
		if p := c.LivenessProbe; p != nil && p.FailureThreshold < 3 {
			t.Errorf("liveness failureThreshold %d, want at least 3", p.FailureThreshold)
		}
		if c.Lifecycle != nil {
			for what, h := range map[string]*corev1.LifecycleHandler{"preStop": c.Lifecycle.PreStop, "postStart": c.Lifecycle.PostStart} {
				if h != nil && h.Exec != nil {
					t.Errorf("%s hook execs %q: the distroless image has no shell or tools", what, h.Exec.Command)
				}
			}
		}
	})
}

// TestResourcesRequestsAndLimits: CPU and memory requests and limits are
// the agreed ones, requests within limits; GOMAXPROCS, when set, follows
// the CPU limit; account's concurrent argon2id hashes fit in half its
// memory limit.
func TestResourcesRequestsAndLimits(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		_, c := deployment(t, b, s)
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, okReq := c.Resources.Requests[r]
			lim, okLim := c.Resources.Limits[r]
			if !okReq || !okLim {
				t.Errorf("%s: request set %v, limit set %v; want both", r, okReq, okLim)
				continue
			}
			if want := s.Requests[r]; req.Cmp(want) != 0 {
				t.Errorf("%s request %s, want %s", r, req.String(), want.String())
			}
			if want := s.Limits[r]; lim.Cmp(want) != 0 {
				t.Errorf("%s limit %s, want %s", r, lim.String(), want.String())
			}
			if req.Cmp(lim) > 0 {
				t.Errorf("%s request %s above limit %s", r, req.String(), lim.String())
			}
		}
		for _, e := range c.Env {
			if e.Name != "GOMAXPROCS" {
				continue
			}
			ref := (*corev1.ResourceFieldSelector)(nil)
			if e.ValueFrom != nil {
				ref = e.ValueFrom.ResourceFieldRef
			}
			if ref == nil || ref.Resource != "limits.cpu" || (ref.ContainerName != "" && ref.ContainerName != c.Name) {
				t.Errorf("GOMAXPROCS must come from this container's limits.cpu (resourceFieldRef), got %+v", e)
			}
		}
		if s.Name != account.Name {
			return
		}
		vars := serviceEnv(t, s.ConfigGo)
		conc, err := strconv.Atoi(envOrDefault(t, b, c, vars, "ACCOUNT_HASH_CONCURRENCY"))
		if err != nil || conc <= 0 {
			t.Errorf("ACCOUNT_HASH_CONCURRENCY must be set explicitly to a positive number in Kubernetes (runtime.NumCPU sees the node, not the limit), got %d %v", conc, err)
		}
		kib, err := strconv.ParseInt(envOrDefault(t, b, c, vars, "ACCOUNT_ARGON2_MEMORY_KIB"), 10, 64)
		if err != nil {
			t.Fatalf("ACCOUNT_ARGON2_MEMORY_KIB: %v", err)
		}
		limit := c.Resources.Limits[corev1.ResourceMemory]
		if hashes := int64(conc) * kib * 1024; hashes > limit.Value()/2 {
			t.Errorf("%d concurrent hashes of %d KiB take %d MiB, more than half the %s memory limit", conc, kib, hashes>>20, limit.String())
		}
	})
}

// TestSecurityContext: non-root as the distroless user, no privilege
// escalation, read-only root, no capabilities, RuntimeDefault seccomp, and
// no service account token.
func TestSecurityContext(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		d, c := deployment(t, b, s)
		pod := d.Spec.Template.Spec
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("automountServiceAccountToken %s, want false", deref(pod.AutomountServiceAccountToken))
		}
		// Service links would add ACCOUNT_PORT, ACCOUNT_SERVICE_HOST, ... to
		// the environment, with the binaries' own prefixes.
		if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
			t.Errorf("enableServiceLinks %s, want false", deref(pod.EnableServiceLinks))
		}
		psc := pod.SecurityContext
		if psc == nil {
			t.Fatal("no pod securityContext")
		}
		if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("pod runAsNonRoot %s, want true", deref(psc.RunAsNonRoot))
		}
		for what, id := range map[string]*int64{"runAsUser": psc.RunAsUser, "runAsGroup": psc.RunAsGroup, "fsGroup": psc.FSGroup} {
			if id == nil || *id != runAsID {
				t.Errorf("pod %s %s, want %d", what, deref(id), runAsID)
			}
		}
		if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("pod seccompProfile %v, want RuntimeDefault", psc.SeccompProfile)
		}
		if len(pod.InitContainers) > 0 || len(pod.Containers) != 1 {
			t.Errorf("want exactly one container and no init containers, got %d and %d", len(pod.Containers), len(pod.InitContainers))
		}
		csc := c.SecurityContext
		if csc == nil {
			t.Fatal("no container securityContext")
		}
		if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
			t.Errorf("allowPrivilegeEscalation %s, want false", deref(csc.AllowPrivilegeEscalation))
		}
		if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
			t.Errorf("readOnlyRootFilesystem %s, want true", deref(csc.ReadOnlyRootFilesystem))
		}
		if csc.Privileged != nil && *csc.Privileged {
			t.Error("privileged")
		}
		if csc.RunAsUser != nil && *csc.RunAsUser == 0 || csc.RunAsNonRoot != nil && !*csc.RunAsNonRoot {
			t.Errorf("the container overrides the pod's non-root user: %+v", csc)
		}
		if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0 {
			t.Errorf("capabilities %+v, want drop [ALL] and nothing added", csc.Capabilities)
		}
	})
}

// TestPodsSpreadAcrossNodes: replicas prefer different nodes, by a
// topology spread constraint or a preferred pod anti-affinity on the node
// hostname, selecting this Deployment's pods.
func TestPodsSpreadAcrossNodes(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		d, _ := deployment(t, b, s)
		pod := d.Spec.Template.Spec
		podLabels := labels.Set(d.Spec.Template.Labels)
		matches := func(ls *metav1.LabelSelector) bool {
			sel, err := metav1.LabelSelectorAsSelector(ls)
			return err == nil && ls != nil && sel.Matches(podLabels)
		}
		spread := false
		for _, c := range pod.TopologySpreadConstraints {
			if c.TopologyKey == corev1.LabelHostname && matches(c.LabelSelector) {
				spread = true
			}
			if c.WhenUnsatisfiable == corev1.DoNotSchedule {
				t.Errorf("topology spread on %s is DoNotSchedule: a cluster with fewer nodes or zones than replicas could not run them", c.TopologyKey)
			}
		}
		if a := pod.Affinity; a != nil && a.PodAntiAffinity != nil {
			for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				if w.PodAffinityTerm.TopologyKey == corev1.LabelHostname && matches(w.PodAffinityTerm.LabelSelector) {
					spread = true
				}
			}
		}
		if !spread {
			t.Errorf("no topology spread constraint or preferred pod anti-affinity on %s selecting the pods", corev1.LabelHostname)
		}
	})
}

// TestGracefulShutdown: the grace period covers the preStop sleep plus the
// binary's drain (SHUTDOWN_TIMEOUT), so SIGKILL never cuts a drain short.
func TestGracefulShutdown(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		d, c := deployment(t, b, s)
		variable := strings.ToUpper(s.Name) + "_SHUTDOWN_TIMEOUT"
		drain := duration(t, variable, envOrDefault(t, b, c, serviceEnv(t, s.ConfigGo), variable))
		var sleep int64
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			sleep = c.Lifecycle.PreStop.Sleep.Seconds
		}
		grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
		if grace == nil {
			t.Fatal("terminationGracePeriodSeconds not set")
		}
		if need := sleep + int64(drain.Seconds()); *grace <= need {
			t.Errorf("terminationGracePeriodSeconds %d, want more than preStop sleep %d s + %s %s", *grace, sleep, variable, drain)
		}
	})
}

// TestServiceSelectsDeploymentPods: the ClusterIP Service selects this
// Deployment's pods (and no other workload's) and maps http and ops to the
// container ports of those names.
func TestServiceSelectsDeploymentPods(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		_, c := deployment(t, b, s)
		service, ok := b.Services[s.Name]
		if !ok {
			t.Fatalf("no Service %q", s.Name)
		}
		if service.Spec.Type != "" && service.Spec.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("type %s, want ClusterIP", service.Spec.Type)
		}
		if len(service.Spec.Selector) == 0 {
			t.Fatal("Service without a selector")
		}
		if got := selects(b, labels.SelectorFromSet(service.Spec.Selector)); !slices.Equal(got, []string{"Deployment/" + s.Name}) {
			t.Errorf("selector %v matches the pods of %v, want only Deployment/%s", service.Spec.Selector, got, s.Name)
		}
		want := map[string]int32{"http": s.HTTPPort, "ops": s.OpsPort}
		got := map[string]int32{}
		for _, p := range service.Spec.Ports {
			target := p.TargetPort
			if target == (intstr.IntOrString{}) {
				target = intstr.FromInt32(p.Port)
			}
			n, err := resolvePort(c, target)
			if err != nil {
				t.Errorf("port %s: %v", p.Name, err)
			}
			if cp, _ := containerPort(c, p.Name); cp != n {
				t.Errorf("Service port %s targets container port %d, not the container port named %s (%d)", p.Name, n, p.Name, cp)
			}
			if p.Port != want[p.Name] {
				t.Errorf("Service port %s = %d, want %d", p.Name, p.Port, want[p.Name])
			}
			got[p.Name] = p.Port
		}
		if len(got) != len(want) {
			t.Errorf("Service ports %v, want %v", got, want)
		}
	})
}

// TestPDBAndHPATargetTheDeployment: the PodDisruptionBudget keeps one pod
// of this Deployment, and the HorizontalPodAutoscaler scales this
// Deployment between 2 and 10 replicas on 70% CPU.
func TestPDBAndHPATargetTheDeployment(t *testing.T) {
	forEach(t, func(t *testing.T, b *build, s svc) {
		pdb, ok := b.PDBs[s.Name]
		if !ok {
			t.Fatalf("no PodDisruptionBudget %q", s.Name)
		}
		if pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable != intstr.FromInt32(1) || pdb.Spec.MaxUnavailable != nil {
			t.Errorf("PDB minAvailable %s maxUnavailable %s, want minAvailable 1 only", deref(pdb.Spec.MinAvailable), deref(pdb.Spec.MaxUnavailable))
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || pdb.Spec.Selector == nil {
			t.Fatalf("PDB selector %v: %v", pdb.Spec.Selector, err)
		}
		if got := selects(b, sel); !slices.Equal(got, []string{"Deployment/" + s.Name}) {
			t.Errorf("PDB selector %s matches the pods of %v, want only Deployment/%s", sel, got, s.Name)
		}

		hpa, ok := b.HPAs[s.Name]
		if !ok {
			t.Fatalf("no HorizontalPodAutoscaler %q", s.Name)
		}
		ref := hpa.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != s.Name {
			t.Errorf("HPA scaleTargetRef %+v, want apps/v1 Deployment %s", ref, s.Name)
		}
		if _, ok := b.Deployments[ref.Name]; !ok {
			t.Errorf("HPA targets %q, not in the build", ref.Name)
		}
		if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 10 {
			t.Errorf("HPA replicas %s..%d, want 2..10", deref(hpa.Spec.MinReplicas), hpa.Spec.MaxReplicas)
		}
		if len(hpa.Spec.Metrics) != 1 {
			t.Fatalf("HPA metrics %+v, want one (CPU)", hpa.Spec.Metrics)
		}
		m := hpa.Spec.Metrics[0]
		if m.Resource == nil || m.Resource.Name != corev1.ResourceCPU || m.Resource.Target.Type != "Utilization" ||
			m.Resource.Target.AverageUtilization == nil || *m.Resource.Target.AverageUtilization != 70 {
			t.Errorf("HPA metric %+v, want CPU utilization 70%%", m)
		}
		// Utilization is relative to the request: without one the HPA
		// cannot compute it.
		_, c := deployment(t, b, s)
		if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
			t.Error("HPA on CPU utilization but the container has no CPU request")
		}
	})
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// deref formats what p points to, for messages.
func deref[T any](p *T) string {
	if p == nil {
		return "<unset>"
	}
	return fmt.Sprint(*p)
}
