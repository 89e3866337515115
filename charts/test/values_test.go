package charttest

import (
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestRulesFiles: the rules given replace the chart's example whole, as
// the README's `--set-file 'rules.files.api\.yaml=...'` gives them.
func TestRulesFiles(t *testing.T) {
	api := "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	for name, tc := range map[string]struct {
		vals map[string]any
		want []string
	}{
		"defaults":  {nil, []string{"example.yaml"}},
		"set-file":  {map[string]any{"rules": map[string]any{"files": map[string]any{"api.yaml": api}}}, []string{"api.yaml"}},
		"two files": {map[string]any{"rules": map[string]any{"files": map[string]any{"api.yaml": api, "web.yml": "domain: web\n"}}}, []string{"api.yaml", "web.yml"}},
	} {
		t.Run(name, func(t *testing.T) {
			o := mustRender(t, tc.vals)
			for _, cm := range []string{fullname + "-rules", fullname + "-rules-check"} {
				data := only(t, o.configMaps, cm).Data
				if got := slices.Sorted(maps.Keys(data)); !slices.Equal(got, tc.want) {
					t.Errorf("ConfigMap %s holds %q, want %q", cm, got, tc.want)
				}
				if name == "set-file" && data["api.yaml"] != api {
					t.Errorf("ConfigMap %s api.yaml = %q, want the file as given", cm, data["api.yaml"])
				}
			}
		})
	}
}

// TestImage: the image named, its tag, and a pull policy when one is set.
func TestImage(t *testing.T) {
	o := mustRender(t, map[string]any{"image": map[string]any{"repository": "reg.example/fl", "tag": "v1.2.3", "pullPolicy": "Always"}})
	c := container(t, o)
	if c.Image != "reg.example/fl:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s, pull policy %q", c.Image, c.ImagePullPolicy)
	}
	if j := only(t, o.jobs, fullname+"-rules-check").Spec.Template.Spec.Containers[0]; j.Image != c.Image || j.ImagePullPolicy != c.ImagePullPolicy {
		t.Errorf("rules check image %s (%q), want the server's", j.Image, j.ImagePullPolicy)
	}
}

// TestImageDefaultTag: without image.tag the image's tag is the chart's
// appVersion, a version (never latest, which Kubernetes would pull anew
// and which names no build), the one the READMEs' docker build gives the
// image; the version label says the same.
func TestImageDefaultTag(t *testing.T) {
	v := appVersion(t)
	if !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(v) {
		t.Errorf("appVersion %q, want a version vX.Y.Z", v)
	}
	o := mustRender(t, nil)
	dep := only(t, o.deployments, fullname)
	if c := dep.Spec.Template.Spec.Containers[0]; c.Image != testImage+":"+v {
		t.Errorf("image %s, want the tag %s", c.Image, v)
	}
	if l := dep.Labels["app.kubernetes.io/version"]; l != v {
		t.Errorf("app.kubernetes.io/version %q, want %q", l, v)
	}
	build := "docker build -t registry.example.com/fastlimit:" + v + " --build-arg VERSION=" + v + " ."
	for _, readme := range []string{chartDir + "/README.md", "../../README.md"} {
		if !strings.Contains(string(readFile(t, readme)), build) {
			t.Errorf("%s does not build the image of tag %s (%q)", readme, v, build)
		}
	}
}

// appVersion is Chart.yaml's appVersion.
func appVersion(t *testing.T) string {
	t.Helper()
	var ch struct {
		AppVersion string `json:"appVersion"`
	}
	unmarshalFile(t, chartDir+"/Chart.yaml", &ch)
	return ch.AppVersion
}

// TestServiceAccount: the release's own ServiceAccount mounts no token,
// nor do the pods; one made elsewhere is named instead.
func TestServiceAccount(t *testing.T) {
	o := mustRender(t, nil)
	sa := only(t, o.serviceAccounts, fullname)
	pod := only(t, o.deployments, fullname).Spec.Template.Spec
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken ||
		pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || pod.ServiceAccountName != fullname {
		t.Errorf("ServiceAccount %+v, pod's %q (automount %v)", sa, pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	o = mustRender(t, map[string]any{"serviceAccount": map[string]any{
		"create": false, "name": "shared", "automountServiceAccountToken": true, "annotations": map[string]any{"a": "b"}}})
	pod = only(t, o.deployments, fullname).Spec.Template.Spec
	if len(o.serviceAccounts) != 0 || pod.ServiceAccountName != "shared" || !*pod.AutomountServiceAccountToken {
		t.Errorf("objects %q, pod's ServiceAccount %q (automount %v)", o.kinds, pod.ServiceAccountName, *pod.AutomountServiceAccountToken)
	}
	o = mustRender(t, map[string]any{"serviceAccount": map[string]any{"name": "mine", "annotations": map[string]any{"a": "b"}}})
	if sa := only(t, o.serviceAccounts, "mine"); sa.Annotations["a"] != "b" {
		t.Errorf("ServiceAccount annotations %v", sa.Annotations)
	}
}

// TestExtraVolumesAndEnv: volumes and mounts given are added beside the
// rules'; env takes plain values and valueFrom, and what it sets
// overrides the chart's memory settings.
func TestExtraVolumesAndEnv(t *testing.T) {
	o := mustRender(t, map[string]any{
		"extraVolumes":      []any{map[string]any{"name": "tls", "secret": map[string]any{"secretName": "fastlimit-tls"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "tls", "mountPath": "/etc/tls", "readOnly": true}},
		"env": map[string]any{
			"GRPC_SERVER_USE_TLS": "true", "NEAR_LIMIT_RATIO": 0.9, "MEMORY_MAX_KEYS": 500000, "GOMEMLIMIT": "300MiB",
			"REDIS_PASSWORD": map[string]any{"valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "redis", "key": "password"}}},
			"POD_NAME":       map[string]any{"valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}},
		},
	})
	pod := only(t, o.deployments, fullname).Spec.Template.Spec
	c := pod.Containers[0]
	if len(pod.Volumes) != 2 || pod.Volumes[1].Secret == nil || pod.Volumes[1].Secret.SecretName != "fastlimit-tls" {
		t.Errorf("volumes %+v", pod.Volumes)
	}
	if len(c.VolumeMounts) != 2 || !reflect.DeepEqual(c.VolumeMounts[1], corev1.VolumeMount{Name: "tls", MountPath: "/etc/tls", ReadOnly: true}) {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	e := env(c)
	for k, v := range map[string]string{"GRPC_SERVER_USE_TLS": "true", "NEAR_LIMIT_RATIO": "0.9", "MEMORY_MAX_KEYS": "500000",
		"GOMEMLIMIT": "300MiB", "REDIS_PASSWORD": "secret/redis/password", "POD_NAME": "valueFrom"} {
		if e[k] != v {
			t.Errorf("env %s = %q, want %q", k, e[k], v)
		}
	}
	names := map[string]int{}
	for _, v := range c.Env {
		names[v.Name]++
	}
	for n, k := range names {
		if k > 1 {
			t.Errorf("env %s given %d times", n, k)
		}
	}
	// The rules check takes the plain values, none from secrets or fields.
	je := env(only(t, o.jobs, fullname+"-rules-check").Spec.Template.Spec.Containers[0])
	if je["NEAR_LIMIT_RATIO"] != "0.9" || je["REDIS_PASSWORD"] != "" || je["POD_NAME"] != "" {
		t.Errorf("rules check env %v", je)
	}
}

// TestProbes: the probes' timing is the values', the startupProbe can be
// left out.
func TestProbes(t *testing.T) {
	o := mustRender(t, map[string]any{
		"startupProbe":   map[string]any{"periodSeconds": 3, "failureThreshold": 40},
		"livenessProbe":  map[string]any{"periodSeconds": 15, "timeoutSeconds": 2, "failureThreshold": 4, "initialDelaySeconds": 1},
		"readinessProbe": map[string]any{"periodSeconds": 7, "successThreshold": 2},
	})
	c := container(t, o)
	want := map[string]struct {
		p                            *corev1.Probe
		path                         string
		period, failure, timeout, ok int32 // ok 0: unset, Kubernetes' 1
	}{
		"startup":   {c.StartupProbe, "/healthcheck", 3, 40, 1, 0},
		"liveness":  {c.LivenessProbe, "/healthcheck", 15, 4, 2, 0},
		"readiness": {c.ReadinessProbe, "/ready", 7, 2, 1, 2},
	}
	for name, w := range want {
		p := w.p
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != w.path || p.HTTPGet.Port != intstr.FromString("http") ||
			p.PeriodSeconds != w.period || p.FailureThreshold != w.failure || p.TimeoutSeconds != w.timeout || p.SuccessThreshold != w.ok {
			t.Errorf("%s probe %+v, want %s every %ds, %d failures, %ds timeout, %d successes", name, p, w.path, w.period, w.failure, w.timeout, w.ok)
		}
	}
	if c.LivenessProbe.InitialDelaySeconds != 1 {
		t.Errorf("liveness initialDelaySeconds %d", c.LivenessProbe.InitialDelaySeconds)
	}
	if c := container(t, mustRender(t, map[string]any{"startupProbe": map[string]any{"enabled": false}})); c.StartupProbe != nil {
		t.Errorf("startupProbe %+v with enabled false", c.StartupProbe)
	}
}

// TestAutoscaling: an HPA in place of replicas, on Redis, with the
// PodDisruptionBudget of its minimum; values that cannot work refused.
func TestAutoscaling(t *testing.T) {
	redis := map[string]any{"url": "redis://r:6379"}
	o := mustRender(t, map[string]any{"redis": redis, "autoscaling": map[string]any{
		"enabled": true, "minReplicas": 3, "maxReplicas": 9, "targetCPUUtilizationPercentage": 60, "targetMemoryUtilizationPercentage": 80,
		"behavior": map[string]any{"scaleDown": map[string]any{"stabilizationWindowSeconds": 600}}}})
	hpa := only(t, o.hpas, fullname)
	if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != fullname || ref.APIVersion != "apps/v1" {
		t.Errorf("scaleTargetRef %+v", ref)
	}
	if *hpa.Spec.MinReplicas != 3 || hpa.Spec.MaxReplicas != 9 || len(hpa.Spec.Metrics) != 2 ||
		*hpa.Spec.Metrics[0].Resource.Target.AverageUtilization != 60 || hpa.Spec.Metrics[1].Resource.Name != corev1.ResourceMemory ||
		*hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 600 {
		t.Errorf("HPA spec %+v", hpa.Spec)
	}
	if r := only(t, o.deployments, fullname).Spec.Replicas; r != nil {
		t.Errorf("replicas %d beside an HPA: each upgrade would reset the HPA's count", *r)
	}
	if len(o.pdbs) != 1 {
		t.Errorf("objects %q: no PodDisruptionBudget for an HPA of at least 3", o.kinds)
	}
	if o := mustRender(t, nil); len(o.hpas) != 0 {
		t.Errorf("an HPA by default: %q", o.kinds)
	}
	for name, tc := range map[string]struct {
		vals map[string]any
		want string
	}{
		"without redis": {map[string]any{"autoscaling": map[string]any{"enabled": true}}, "autoscaling.maxReplicas > 1 needs redis.url"},
		"min over max":  {map[string]any{"redis": redis, "autoscaling": map[string]any{"enabled": true, "minReplicas": 5, "maxReplicas": 2}}, "minReplicas is above"},
		"no target": {map[string]any{"redis": redis, "autoscaling": map[string]any{"enabled": true, "targetCPUUtilizationPercentage": 0}},
			"needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage"},
	} {
		if _, err := render(t, tc.vals); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

// TestUpdateStrategy: a rollout never takes an old pod away before a new
// one is ready, unless the values say otherwise.
func TestUpdateStrategy(t *testing.T) {
	s := only(t, mustRender(t, nil).deployments, fullname).Spec.Strategy
	if s.Type != "RollingUpdate" || s.RollingUpdate == nil || *s.RollingUpdate.MaxUnavailable != intstr.FromInt32(0) ||
		*s.RollingUpdate.MaxSurge != intstr.FromString("25%") {
		t.Errorf("strategy %+v", s)
	}
	s = only(t, mustRender(t, map[string]any{"updateStrategy": map[string]any{"type": "Recreate"}}).deployments, fullname).Spec.Strategy
	if s.Type != "Recreate" || s.RollingUpdate != nil {
		t.Errorf("strategy %+v, want Recreate alone", s)
	}
	s = only(t, mustRender(t, map[string]any{"updateStrategy": map[string]any{"rollingUpdate": map[string]any{"maxSurge": 2, "maxUnavailable": "50%"}}}).deployments,
		fullname).Spec.Strategy
	if s.Type != "RollingUpdate" || s.RollingUpdate == nil || *s.RollingUpdate.MaxSurge != intstr.FromInt32(2) ||
		*s.RollingUpdate.MaxUnavailable != intstr.FromString("50%") {
		t.Errorf("strategy %+v, want updateStrategy.rollingUpdate's maxSurge 2, maxUnavailable 50%%", s)
	}
}

// TestImagePullSecrets: every pod the chart makes (FastLimit's, the rules
// check's, helm test's) pulls with the secrets given, and none without.
func TestImagePullSecrets(t *testing.T) {
	want := []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}}
	for what, pod := range podSpecs(t, mustRender(t, map[string]any{"imagePullSecrets": []any{map[string]any{"name": "regcred"}, map[string]any{"name": "mirror"}}})) {
		if !reflect.DeepEqual(pod.ImagePullSecrets, want) {
			t.Errorf("%s: imagePullSecrets %+v, want %+v", what, pod.ImagePullSecrets, want)
		}
	}
	for what, pod := range podSpecs(t, mustRender(t, nil)) {
		if pod.ImagePullSecrets != nil {
			t.Errorf("%s: imagePullSecrets %+v by default", what, pod.ImagePullSecrets)
		}
	}
}

// podSpecs are the pods of the Deployment, the rules check and helm test.
func podSpecs(t *testing.T, o *objects) map[string]corev1.PodSpec {
	t.Helper()
	return map[string]corev1.PodSpec{
		"Deployment":  only(t, o.deployments, fullname).Spec.Template.Spec,
		"rules check": only(t, o.jobs, fullname+"-rules-check").Spec.Template.Spec,
		"helm test":   only(t, o.pods, fullname+"-test").Spec,
	}
}

// Sizes of docs/settings.md's "The embedded store's memory": the most
// heap one entry takes (a token bucket's), and how far RSS runs above the
// heap without GOMEMLIMIT.
const (
	heapPerEntry = 181
	rssPerHeap   = 1.5
	// baseline is the rest of the process (runtime, gRPC, metrics), with room.
	baseline = 64 << 20
)

// TestMemoryDefaults: the memory limit holds a full embedded store as
// docs/settings.md sizes it, GOMEMLIMIT is 90% of the limit and above the
// store's heap; the chart derives it from any limit, and leaves it (and
// MEMORY_MAX_KEYS) to env when env sets them.
func TestMemoryDefaults(t *testing.T) {
	c := container(t, mustRender(t, nil))
	limit := c.Resources.Limits.Memory().Value()
	e := env(c)
	maxKeys, _ := strconv.ParseFloat(e["MEMORY_MAX_KEYS"], 64)
	goMem, _ := strconv.ParseInt(e["GOMEMLIMIT"], 10, 64)
	if limit != 384<<20 || maxKeys != 1e6 || goMem != int64(math.Floor(0.9*float64(limit))) {
		t.Errorf("limit %d, MEMORY_MAX_KEYS %s, GOMEMLIMIT %s", limit, e["MEMORY_MAX_KEYS"], e["GOMEMLIMIT"])
	}
	if need := maxKeys*heapPerEntry*rssPerHeap + baseline; need > float64(limit) {
		t.Errorf("a full store's RSS, about %.0f MiB, is above the limit of %d MiB", need/(1<<20), limit>>20)
	}
	if heap := maxKeys*heapPerEntry + baseline; heap > float64(goMem) {
		t.Errorf("a full store's heap, about %.0f MiB, is above GOMEMLIMIT (%d MiB): the collector would run without end", heap/(1<<20), goMem>>20)
	}
	for name, tc := range map[string]struct {
		vals map[string]any
		want map[string]string // "": unset
	}{
		"1Gi limit":   {map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1Gi"}}}, map[string]string{"GOMEMLIMIT": "966367641"}},
		"1.5Gi limit": {map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1.5Gi"}}}, map[string]string{"GOMEMLIMIT": "1449551462"}},
		"500M at 80%": {map[string]any{"goMemLimitPercent": 80, "resources": map[string]any{"limits": map[string]any{"memory": "500M"}}},
			map[string]string{"GOMEMLIMIT": "400000000"}},
		"no limit":   {map[string]any{"resources": map[string]any{"limits": nil}}, map[string]string{"GOMEMLIMIT": ""}},
		"percent 0":  {map[string]any{"goMemLimitPercent": 0}, map[string]string{"GOMEMLIMIT": ""}},
		"max keys":   {map[string]any{"embeddedStore": map[string]any{"maxKeys": 250000}}, map[string]string{"MEMORY_MAX_KEYS": "250000"}},
		"with redis": {map[string]any{"redis": map[string]any{"url": "r:6379"}}, map[string]string{"MEMORY_MAX_KEYS": "", "GOMEMLIMIT": "362387865"}},
	} {
		e := env(container(t, mustRender(t, tc.vals)))
		for k, v := range tc.want {
			if got, ok := e[k]; got != v || ok != (v != "") {
				t.Errorf("%s: env %s = %q (set %v), want %q", name, k, got, ok, v)
			}
		}
	}
	_, err := render(t, map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "384e6"}}})
	if err == nil || !strings.Contains(err.Error(), "/resources/limits/memory") {
		t.Errorf("limit 384e6: %v, want the schema to refuse it", err)
	}
	// The quantity the chart parses is Kubernetes' own.
	if q := resource.MustParse("1.5Gi"); q.Value() != 1610612736 {
		t.Errorf("1.5Gi = %d", q.Value())
	}
}

// TestRLQS: RLQS off unless rlqs.enabled; with rlqs.process, in a
// process of its own on rlqs.port, published as grpc-rlqs; rlqs.process
// alone is refused.
func TestRLQS(t *testing.T) {
	for _, tc := range []struct {
		vals          map[string]any
		want, addr    string
		processPorted bool
	}{
		{nil, "false", "", false},
		{map[string]any{"rlqs": map[string]any{"enabled": true}}, "true", "", false},
		{map[string]any{"rlqs": map[string]any{"enabled": true, "process": true}}, "true", "0.0.0.0:8082", true},
		{map[string]any{"rlqs": map[string]any{"enabled": true, "process": true, "port": 9000}}, "true", "0.0.0.0:9000", true},
	} {
		o := mustRender(t, tc.vals)
		c := container(t, o)
		e := env(c)
		if e["RLQS"] != tc.want || e["RLQS_ADDR"] != tc.addr || (e["RLQS_PROCESS"] == "true") != tc.processPorted {
			t.Errorf("%v: RLQS = %q, RLQS_ADDR = %q, RLQS_PROCESS = %q", tc.vals, e["RLQS"], e["RLQS_ADDR"], e["RLQS_PROCESS"])
		}
		ported := slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "grpc-rlqs" })
		published := false
		for _, svc := range o.services {
			for _, p := range svc.Spec.Ports {
				if p.Name == "grpc-rlqs" && p.TargetPort.StrVal == "grpc-rlqs" && p.AppProtocol != nil && *p.AppProtocol == "grpc" {
					published = true
				}
			}
		}
		if ported != tc.processPorted || published != tc.processPorted {
			t.Errorf("%v: grpc-rlqs container port %v, Service port %v; want %v", tc.vals, ported, published, tc.processPorted)
		}
	}
	if _, err := render(t, map[string]any{"rlqs": map[string]any{"process": true}}); err == nil || !strings.Contains(err.Error(), "rlqs.process") {
		t.Errorf("rlqs.process without rlqs.enabled: %v, want an error naming it", err)
	}
}

// TestRedisPoolSize: REDIS_POOL_SIZE only when given.
func TestRedisPoolSize(t *testing.T) {
	e := env(container(t, mustRender(t, map[string]any{"redis": map[string]any{"url": "r:6379", "poolSize": 40}})))
	if e["REDIS_POOL_SIZE"] != "40" {
		t.Errorf("REDIS_POOL_SIZE = %q, want 40", e["REDIS_POOL_SIZE"])
	}
}

// TestSchema: values.schema.json refuses what the chart cannot use, at
// render and in lint, naming the value.
func TestSchema(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"replicaCount": "three"}, "replicaCount"},
		{map[string]any{"replicas": 3}, "replicas"},
		{map[string]any{"logLevel": "verbose"}, "logLevel"},
		{map[string]any{"image": map[string]any{"repository": "r", "pullPolicy": "Sometimes"}}, "pullPolicy"},
		{map[string]any{"env": map[string]any{"X": map[string]any{"valueFrm": map[string]any{}}}}, "env"},
		{map[string]any{"env": map[string]any{"bad name": "x"}}, "bad name"},
		{map[string]any{"livenessProbe": map[string]any{"periodSecond": 5}}, "periodSecond"},
		{map[string]any{"rules": map[string]any{"files": map[string]any{"api.txt": "domain: a\n"}}}, "api.txt"},
		{map[string]any{"redis": map[string]any{"type": "replicated"}}, "type"},
		{map[string]any{"redis": map[string]any{"poolSize": -1}}, "poolSize"},
		{map[string]any{"goMemLimitPercent": 120}, "goMemLimitPercent"},
		{map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "lots"}}}, "memory"},
		{map[string]any{"prometheusRule": map[string]any{"for": "five minutes"}}, "for"},
		{map[string]any{"autoscaling": map[string]any{"maxReplicas": 0}}, "maxReplicas"},
		{map[string]any{"extraVolumeMounts": []any{map[string]any{"name": "x"}}}, "mountPath"},
	} {
		_, err := render(t, tc.vals)
		if err == nil || !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: render %v, want a schema error naming %q", tc.vals, err, tc.want)
		}
	}
	l := lintChart(t, map[string]any{"replicaCount": "three"})
	if !slices.ContainsFunc(l, func(m string) bool { return strings.Contains(m, "replicaCount") }) {
		t.Errorf("lint of replicaCount: three: %q, want an error naming it", l)
	}
}

// TestValuesDocumented: every value of values.yaml is a row of the chart's
// README, and the schema defines it.
func TestValuesDocumented(t *testing.T) {
	readme := string(readFile(t, chartDir+"/README.md"))
	var vals, schema map[string]any
	unmarshalFile(t, chartDir+"/values.yaml", &vals)
	unmarshalFile(t, chartDir+"/values.schema.json", &schema)
	// Maps and lists passed to Kubernetes as they are: documented whole.
	whole := []string{"resources", "podSecurityContext", "securityContext", "rules.defaultFiles", "rules.check.resources",
		"updateStrategy.rollingUpdate", "dashboard.labels", "podDisruptionBudget.minAvailable"}
	var walk func(prefix string, v any, s map[string]any)
	walk = func(prefix string, v any, s map[string]any) {
		m, isMap := v.(map[string]any)
		if !isMap || len(m) == 0 || slices.Contains(whole, prefix) {
			if !strings.Contains(readme, "| `"+prefix+"` |") {
				t.Errorf("value %s has no row in the chart's README", prefix)
			}
			return
		}
		props, _ := s["properties"].(map[string]any)
		for k, sub := range m {
			ss, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("value %s.%s is not in values.schema.json", prefix, k)
				continue
			}
			walk(strings.TrimPrefix(prefix+"."+k, "."), sub, ss)
		}
	}
	walk("", vals, schema)
	if !reflect.DeepEqual(schema["additionalProperties"], false) {
		t.Error("values.schema.json accepts unknown top-level values")
	}
}

func container(t *testing.T, o *objects) corev1.Container {
	t.Helper()
	return only(t, o.deployments, fullname).Spec.Template.Spec.Containers[0]
}
