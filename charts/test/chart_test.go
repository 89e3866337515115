package charttest

import (
	"encoding/json"
	"io"
	"log"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const fullname = "rl-fastlimit"

// production is what a replicated deployment sets.
func production() map[string]any {
	return map[string]any{
		"replicaCount":        3,
		"redis":               map[string]any{"url": "redis://redis.limits.svc:6379/0"},
		"serviceMonitor":      map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}},
		"dashboard":           map[string]any{"enabled": true},
		"referencePrometheus": map[string]any{"enabled": true},
		"logFormat":           "text",
		"env":                 map[string]any{"NEAR_LIMIT_RATIO": "0.9", "SHADOW_MODE": "false"},
	}
}

// TestLint runs Helm's linter on the chart with its defaults (the image
// left unnamed, which `required` lets pass when linting) and with the
// production values: no errors, no warnings, as `helm lint --strict`.
func TestLint(t *testing.T) {
	log.SetOutput(io.Discard) // lint logs the missing image.repository at info
	defer log.SetOutput(os.Stderr)
	for name, vals := range map[string]map[string]any{"defaults": nil, "production": production()} {
		t.Run(name, func(t *testing.T) {
			for _, m := range lintChart(t, vals) {
				t.Errorf("lint: %s", m)
			}
		})
	}
}

// TestDefaults renders the defaults: one replica on the embedded store,
// rules from the chart's ConfigMap at the reference's path, and the
// reference's environment contract; the hooks check the rules and test
// the release.
func TestDefaults(t *testing.T) {
	o := mustRender(t, nil)
	want := []string{"ServiceAccount/" + fullname, "ConfigMap/" + fullname + "-rules", "Service/" + fullname, "Deployment/" + fullname,
		"ConfigMap/" + fullname + "-rules-check", "Pod/" + fullname + "-test", "Job/" + fullname + "-rules-check"}
	if !slices.Equal(o.kinds, want) {
		t.Errorf("objects %q, want %q", o.kinds, want)
	}
	dep := only(t, o.deployments, fullname)
	if *dep.Spec.Replicas != 1 {
		t.Errorf("replicas %d", *dep.Spec.Replicas)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != testImage+":"+appVersion(t) || c.ImagePullPolicy != "" || len(c.Command) != 0 || len(c.Args) != 0 {
		t.Errorf("image %s (%q) command %q args %q: want the image named, Kubernetes' pull policy, run on its environment alone",
			c.Image, c.ImagePullPolicy, c.Command, c.Args)
	}
	wantEnv := map[string]string{
		"LOG_LEVEL": "info", "LOG_FORMAT": "json", "PORT": "8080", "GRPC_PORT": "8081",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "6070", "METRICS_ADDR": "0.0.0.0:6071",
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"RUNTIME_IGNOREDOTFILES": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true", "USE_STATSD": "false",
		"RLQS": "false", "MEMORY_MAX_KEYS": "1000000", "GOMEMLIMIT": "362387865", // 90% of 384Mi
	}
	if got := env(c); !reflect.DeepEqual(got, wantEnv) {
		t.Errorf("env\n got %v\nwant %v", got, wantEnv)
	}
	checkPod(t, o, fullname+"-rules", "/data/ratelimit/config")
	checkService(t, o, []string{"http", "grpc", "http-metrics"})

	// The chart's rules, as values.yaml gives them; that FastLimit and the
	// reference load them is examples' TestChartRules.
	cm := only(t, o.configMaps, fullname+"-rules")
	if len(cm.Data) != 1 || !strings.Contains(cm.Data["example.yaml"], "domain: example") {
		t.Errorf("rules ConfigMap %v, want values.yaml's example.yaml", cm.Data)
	}
}

// TestProduction renders a replicated deployment on Redis with metrics,
// dashboard and PodDisruptionBudget, and checks the objects hang together.
func TestProduction(t *testing.T) {
	o := mustRender(t, production())
	for _, k := range []string{"Secret/" + fullname + "-redis", "ConfigMap/" + fullname + "-rules", "ConfigMap/" + fullname + "-dashboard",
		"Service/" + fullname, "Deployment/" + fullname, "PodDisruptionBudget/" + fullname, "ServiceMonitor/" + fullname} {
		if !slices.Contains(o.kinds, k) {
			t.Errorf("no %s in %q", k, o.kinds)
		}
	}
	dep := only(t, o.deployments, fullname)
	if *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %d", *dep.Spec.Replicas)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	e := env(c)
	for k, v := range map[string]string{
		"REDIS_URL": "secret/" + fullname + "-redis/url", "REDIS_TYPE": "SINGLE", "REDIS_SOCKET_TYPE": "tcp",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":9090", "USE_STATSD": "false",
		"LOG_FORMAT": "text", "NEAR_LIMIT_RATIO": "0.9", "SHADOW_MODE": "false",
	} {
		if e[k] != v {
			t.Errorf("env %s = %q, want %q", k, e[k], v)
		}
	}
	// FastLimit's own pool default, and no embedded store to bound.
	for _, k := range []string{"REDIS_POOL_SIZE", "MEMORY_MAX_KEYS"} {
		if v, ok := e[k]; ok {
			t.Errorf("env %s = %q, want it unset", k, v)
		}
	}
	sec := only(t, o.secrets, fullname+"-redis")
	if sec.StringData["url"] != "redis://redis.limits.svc:6379/0" || sec.Type != corev1.SecretTypeOpaque {
		t.Errorf("secret %+v", sec)
	}
	if dep.Spec.Template.Annotations["checksum/redis"] == "" {
		t.Error("no checksum/redis annotation: a new Redis URL would not restart the pods")
	}
	checkPod(t, o, fullname+"-rules", "/data/ratelimit/config")
	checkService(t, o, []string{"http", "grpc", "http-metrics", "prometheus"})

	pdb := only(t, o.pdbs, fullname)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 ||
		!reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget %+v does not keep one of the Deployment's pods", pdb.Spec)
	}

	sm := only(t, o.serviceMonitors, fullname)
	svc := only(t, o.services, fullname)
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, which Service %s lacks (%v)", k, v, svc.Name, svc.Labels)
		}
	}
	if sm.Labels["release"] != "kube-prometheus" {
		t.Errorf("ServiceMonitor labels %v lack serviceMonitor.labels", sm.Labels)
	}
	var ports []string
	for _, ep := range sm.Spec.Endpoints {
		ports = append(ports, ep.Port)
		if ep.Path != "/metrics" {
			t.Errorf("endpoint %s path %s", ep.Port, ep.Path)
		}
	}
	if !slices.Equal(ports, []string{"http-metrics", "prometheus"}) {
		t.Errorf("ServiceMonitor endpoints %q", ports)
	}
	if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor namespaces %q", sm.Spec.NamespaceSelector.MatchNames)
	}

	dash := only(t, o.configMaps, fullname+"-dashboard")
	if dash.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard", dash.Labels)
	}
	if !equalBytes([]byte(dash.Data["fastlimit.json"]), readFile(t, chartDir+"/dashboards/fastlimit.json")) {
		t.Error("the dashboard ConfigMap does not hold dashboards/fastlimit.json as it is")
	}
	if !json.Valid([]byte(dash.Data["fastlimit.json"])) {
		t.Error("the dashboard ConfigMap's JSON does not parse")
	}
}

// TestExistingObjects uses a Secret and a ConfigMap made elsewhere: the
// chart refers to them and makes neither.
func TestExistingObjects(t *testing.T) {
	o := mustRender(t, map[string]any{
		"replicaCount": 2,
		"redis":        map[string]any{"existingSecret": "redis-creds", "existingSecretKey": "REDIS_URL", "type": "CLUSTER"},
		"rules":        map[string]any{"existingConfigMap": "my-rules", "runtimeRoot": "/srv/runtime_data/current/", "runtimeSubdirectory": "rl"},
	})
	if len(o.secrets) != 0 || len(o.configMaps) != 0 {
		t.Errorf("objects %q: want no Secret and no ConfigMap (the rules check mounts my-rules)", o.kinds)
	}
	c := only(t, o.deployments, fullname).Spec.Template.Spec.Containers[0]
	e := env(c)
	if e["REDIS_URL"] != "secret/redis-creds/REDIS_URL" || e["REDIS_TYPE"] != "CLUSTER" {
		t.Errorf("env %v", e)
	}
	checkPod(t, o, "my-rules", "/srv/runtime_data/current/rl/config")
	if len(o.pdbs) != 1 {
		t.Errorf("two replicas and no PodDisruptionBudget: %q", o.kinds)
	}
}

// TestRefusals: values that would make a broken deployment fail to render,
// with a message that says why.
func TestRefusals(t *testing.T) {
	cases := []struct {
		name string
		vals map[string]any
		want string
	}{
		{"replicas without redis", map[string]any{"replicaCount": 2}, "each replica counts alone"},
		{"no rules", map[string]any{"rules": map[string]any{"files": nil, "defaultFiles": nil}}, "no rules"},
		{"no image", map[string]any{"image": map[string]any{"repository": ""}}, "image.repository is required: FastLimit publishes no image"},
		{"two stats sinks", map[string]any{"statsd": map[string]any{"enabled": true, "host": "statsd"},
			"referencePrometheus": map[string]any{"enabled": true}}, "one stats sink"},
		{"statsd without host", map[string]any{"statsd": map[string]any{"enabled": true}}, "statsd.host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestStatsd sends the reference's stats to statsd.
func TestStatsd(t *testing.T) {
	o := mustRender(t, map[string]any{"statsd": map[string]any{"enabled": true, "host": "statsd.monitoring", "port": 9125}})
	e := env(only(t, o.deployments, fullname).Spec.Template.Spec.Containers[0])
	if e["USE_STATSD"] != "true" || e["STATSD_HOST"] != "statsd.monitoring" || e["STATSD_PORT"] != "9125" {
		t.Errorf("env %v", e)
	}
}

// TestStrictDecoding proves the decoding the tests rely on refuses a field
// the Kubernetes type does not have.
func TestStrictDecoding(t *testing.T) {
	bad := "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selectr: {a: b}}\n"
	if _, err := decode(bad); err == nil || !strings.Contains(err.Error(), "selectr") {
		t.Errorf("decode of a misspelt field: %v", err)
	}
	if _, err := decode("apiVersion: v1\nkind: Namespace\nmetadata: {name: p}\n"); err == nil {
		t.Error("decode of an unexpected kind: no error")
	}
}

// checkPod checks the pod template: probes on /healthcheck and /ready at a
// container port, the rules ConfigMap mounted as a directory at mount,
// the selector selecting the pods, and a non-root user.
func checkPod(t *testing.T, o *objects, configMap, mount string) {
	t.Helper()
	dep := only(t, o.deployments, fullname)
	pod := dep.Spec.Template
	for k, v := range dep.Spec.Selector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("selector %s=%s does not select the pods %v", k, v, pod.Labels)
		}
	}
	c := pod.Spec.Containers[0]
	named := map[string]int32{}
	for _, p := range c.Ports {
		named[p.Name] = p.ContainerPort
	}
	for what, pr := range map[string]*corev1.Probe{"/healthcheck": c.LivenessProbe, "/ready": c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != what {
			t.Errorf("probe for %s: %+v", what, pr)
			continue
		}
		if p := pr.HTTPGet.Port; p.Type != intstr.String || named[p.StrVal] != named["http"] || named["http"] == 0 {
			t.Errorf("probe %s on port %v, want the http container port", what, p)
		}
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != mount || c.VolumeMounts[0].SubPath != "" || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("mounts %+v, want the rules read-only at %s, no subPath", c.VolumeMounts, mount)
	}
	vols := pod.Spec.Volumes
	if len(vols) != 1 || vols[0].Name != c.VolumeMounts[0].Name || vols[0].ConfigMap == nil || vols[0].ConfigMap.Name != configMap {
		t.Errorf("volumes %+v, want ConfigMap %s", vols, configMap)
	}
	e := env(c)
	if got := strings.TrimSuffix(e["RUNTIME_ROOT"], "/") + "/" + e["RUNTIME_SUBDIRECTORY"] + "/config"; got != mount {
		t.Errorf("RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config = %s, mounted at %s", got, mount)
	}
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("pod security context %+v", psc)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container security context %+v", sc)
	}
}

// checkService checks the Service's ports, in order, each targeting a
// named container port of the Deployment, and its selector.
func checkService(t *testing.T, o *objects, names []string) {
	t.Helper()
	dep := only(t, o.deployments, fullname)
	svc := only(t, o.services, fullname)
	container := map[string]int32{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		container[p.Name] = p.ContainerPort
	}
	var got []string
	for _, p := range svc.Spec.Ports {
		got = append(got, p.Name)
		if p.TargetPort.Type != intstr.String || container[p.TargetPort.StrVal] != p.Port {
			t.Errorf("Service port %s (%d) targets %v, which is not the container port of that number", p.Name, p.Port, p.TargetPort)
		}
		if p.Name == "grpc" && (p.AppProtocol == nil || *p.AppProtocol != "grpc") {
			t.Errorf("Service port grpc has no appProtocol grpc")
		}
	}
	if !slices.Equal(got, names) {
		t.Errorf("Service ports %q, want %q", got, names)
	}
	if !reflect.DeepEqual(svc.Spec.Selector, dep.Spec.Selector.MatchLabels) {
		t.Errorf("Service selector %v, Deployment's %v", svc.Spec.Selector, dep.Spec.Selector.MatchLabels)
	}
}
