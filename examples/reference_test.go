package examples_test

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/internal/testing/dashboard"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/refserver"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

const (
	kubernetesDir = "kubernetes"
	// The dashboard's one source is the chart's file; examples/grafana
	// holds a copy that must stay identical.
	chartDashboard   = "../charts/fastlimit/dashboards/fastlimit.json"
	exampleDashboard = "grafana/fastlimit.json"
)

// extensionRules are the example rules that use FastLimit's extensions on
// purpose, and so do not load on envoyproxy/ratelimit. Every other rules
// file in the repository does.
var extensionRules = []string{
	"fastlimit-only/saas_api.yaml",
	"fastlimit-only/api_plans.yaml",
	"envoy/rules/edge.yaml",
	"istio/rules-configmap.yaml",
}

// TestRulesLoadOnReference starts envoyproxy/ratelimit at the pinned
// version (refserver) over the shipped rules (config/, whole tree, as the
// reference reads a directory), the Kubernetes example's rules and the
// quota service example's, which it must load, and over each file kept apart for FastLimit's extensions,
// which it must refuse.
func TestRulesLoadOnReference(t *testing.T) {
	refserver.Bin(t)
	shipped := map[string]string{}
	err := filepath.WalkDir("../config", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			shipped[strings.ReplaceAll(strings.TrimPrefix(p, "../config/"), "/", "_")] = string(files.Read(t, p))
		}
		return err
	})
	if err != nil || len(shipped) == 0 {
		t.Fatalf("rules under ../config: %v %v", shipped, err)
	}
	loadsOnReference(t, "config/", shipped)
	k8s := map[string]string{}
	for name, b := range configMapRules(t, kubernetesDir, "ratelimit-config") {
		k8s[name] = string(b)
	}
	loadsOnReference(t, kubernetesDir+" ConfigMap ratelimit-config", k8s)
	rlqsRules := map[string]string{}
	quotaFiles, err := filepath.Glob("envoy-rlqs/rules/*.yaml")
	if err != nil || len(quotaFiles) == 0 {
		t.Fatalf("rules under envoy-rlqs/rules: %v %v", quotaFiles, err)
	}
	for _, p := range quotaFiles {
		rlqsRules[filepath.Base(p)] = string(files.Read(t, p))
	}
	loadsOnReference(t, "envoy-rlqs/rules/", rlqsRules)
	// The reference's keys where they mean nothing, which FastLimit loads
	// with a warning (pkg/rules' TestReferenceKeysLoad).
	refKeys := map[string]string{}
	keyFiles, err := filepath.Glob("../pkg/rules/testdata/refkeys/*.yaml")
	if err != nil || len(keyFiles) == 0 {
		t.Fatalf("rules under pkg/rules/testdata/refkeys: %v %v", keyFiles, err)
	}
	for _, p := range keyFiles {
		refKeys[filepath.Base(p)] = string(files.Read(t, p))
	}
	loadsOnReference(t, "pkg/rules/testdata/refkeys/", refKeys)
	for _, p := range extensionRules {
		b := files.Read(t, p)
		if p == "istio/rules-configmap.yaml" {
			for name, r := range istioRuleFiles(t) {
				refusedByReference(t, p+" "+name, string(r))
			}
			continue
		}
		refusedByReference(t, p, string(b))
		if !bytes.Contains(b, []byte("FastLimit")) {
			t.Errorf("%s does not say in its comments that it is FastLimit's format", p)
		}
	}
}

// loadsOnReference fails t unless the reference loads rules.
func loadsOnReference(t *testing.T, what string, rules map[string]string) {
	t.Helper()
	if err := refserver.Start(t, refserver.Options{Rules: rules}).LoadError(); err != nil {
		t.Errorf("envoyproxy/ratelimit does not load %s: %v", what, err)
	}
}

// refusedByReference fails t if the reference loads the rules file body.
func refusedByReference(t *testing.T, what, body string) {
	t.Helper()
	if refserver.Start(t, refserver.Options{Rules: map[string]string{"rules.yaml": body}}).LoadError() == nil {
		t.Errorf("%s loads on envoyproxy/ratelimit: it is no longer FastLimit-only; move it with the shipped rules", what)
	}
}

// configMapRules returns the data of the ConfigMap name in dir's manifests.
func configMapRules(t *testing.T, dir, name string) map[string][]byte {
	t.Helper()
	for _, o := range loadManifestsIn(t, dir) {
		if o.Kind != "ConfigMap" || o.Metadata.Name != name {
			continue
		}
		var cm struct {
			Data map[string]string `yaml:"data"`
		}
		decodeNode(t, o, &cm)
		out := map[string][]byte{}
		for k, v := range cm.Data {
			out[k] = []byte(v)
		}
		return out
	}
	t.Fatalf("no ConfigMap %s in %s", name, dir)
	return nil
}

// TestKubernetesIsIstioSample holds examples/kubernetes to Istio's sample
// rate limit service (samples/ratelimit/rate-limit-service.yaml) with only
// the ratelimit image changed: the objects, the environment contract,
// ports and the rules mount are the sample's, and FastLimit loads the
// rules the sample's ConfigMap carries.
func TestKubernetesIsIstioSample(t *testing.T) {
	objs := loadManifestsIn(t, kubernetesDir)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.Kind+"/"+o.Metadata.Name)
		if o.Metadata.Namespace != "" {
			t.Errorf("%s %s has a namespace; the sample's objects have none", o.Kind, o.Metadata.Name)
		}
	}
	slices.Sort(kinds)
	if want := []string{"ConfigMap/ratelimit-config", "Deployment/ratelimit", "Deployment/redis", "Service/ratelimit", "Service/redis"}; !slices.Equal(kinds, want) {
		t.Fatalf("objects %q, want %q", kinds, want)
	}
	find := func(kind, name string) *k8sObject {
		for _, o := range objs {
			if o.Kind == kind && o.Metadata.Name == name {
				return o
			}
		}
		return nil
	}

	var dep deployment
	decodeNode(t, find("Deployment", "ratelimit"), &dep)
	if dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != "Recreate" || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment ratelimit: %+v", dep.Spec)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Name != "ratelimit" || !reflect.DeepEqual(c.Command, []string{"/bin/ratelimit"}) {
		t.Errorf("container %s command %q, want ratelimit running /bin/ratelimit", c.Name, c.Command)
	}
	if !strings.HasPrefix(c.Image, "registry.example.com/fastlimit:") {
		t.Errorf("image %s is not the README's FastLimit image (built and pushed by the user)", c.Image)
	}
	env := map[string]string{}
	var order []string
	for _, e := range c.Env {
		env[e.Name] = e.Value
		order = append(order, e.Name)
	}
	// The sample's environment, in its order.
	want := []struct{ name, value string }{
		{"LOG_LEVEL", "debug"}, {"REDIS_SOCKET_TYPE", "tcp"}, {"REDIS_URL", "redis:6379"}, {"USE_STATSD", "false"},
		{"RUNTIME_ROOT", "/data"}, {"RUNTIME_SUBDIRECTORY", "ratelimit"}, {"RUNTIME_WATCH_ROOT", "false"},
		{"RUNTIME_IGNOREDOTFILES", "true"}, {"HOST", "::"}, {"GRPC_HOST", "::"},
	}
	var wantOrder []string
	for _, w := range want {
		wantOrder = append(wantOrder, w.name)
		if env[w.name] != w.value {
			t.Errorf("env %s = %q, want %q", w.name, env[w.name], w.value)
		}
	}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("env %q, want exactly %q", order, wantOrder)
	}
	var ports []int
	for _, p := range c.Ports {
		ports = append(ports, p.ContainerPort)
	}
	if !slices.Equal(ports, []int{8080, 8081, 6070}) {
		t.Errorf("container ports %v", ports)
	}
	mount := env["RUNTIME_ROOT"] + "/" + env["RUNTIME_SUBDIRECTORY"] + "/config"
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != mount || c.VolumeMounts[0].Name != "config-volume" {
		t.Errorf("volume mounts %+v, want config-volume at %s", c.VolumeMounts, mount)
	}
	if v := dep.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].Name != "config-volume" || v[0].ConfigMap == nil ||
		v[0].ConfigMap.Name != "ratelimit-config" {
		t.Errorf("volumes %+v, want config-volume from ConfigMap ratelimit-config", v)
	}

	var svc service
	decodeNode(t, find("Service", "ratelimit"), &svc)
	got := map[string]int{}
	for _, p := range svc.Spec.Ports {
		got[p.Name] = p.Port
		if tp, _ := p.TargetPort.(int); tp != p.Port {
			t.Errorf("Service ratelimit port %s targets %v, want %d", p.Name, p.TargetPort, p.Port)
		}
	}
	if !reflect.DeepEqual(got, map[string]int{"http-port": 8080, "grpc-port": 8081, "http-debug": 6070}) {
		t.Errorf("Service ratelimit ports %v", got)
	}
	if svc.Spec.Selector["app"] != "ratelimit" {
		t.Errorf("Service ratelimit selects %v", svc.Spec.Selector)
	}

	files := configMapRules(t, kubernetesDir, "ratelimit-config")
	loaded, err := rules.Parse(files)
	if err != nil {
		t.Fatalf("FastLimit does not load ConfigMap ratelimit-config: %v", err)
	}
	if loaded.Set.Domain("echo-ratelimit") == nil {
		t.Errorf("domains %v, want echo-ratelimit", loaded.Set.Domains())
	}
}

// TestDashboard keeps the example dashboard identical to the chart's and
// checks that each of its queries parses and names FastLimit's series.
// That a running server serves every one of them is e2e's test.
func TestDashboard(t *testing.T) {
	chart, example := files.Read(t, chartDashboard), files.Read(t, exampleDashboard)
	if !bytes.Equal(chart, example) {
		t.Fatalf("%s differs from %s: copy the chart's file (its one source)", exampleDashboard, chartDashboard)
	}
	qs, err := dashboard.Queries(chart)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	for _, q := range qs {
		names, err := dashboard.MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %q: %v", q.Where, q.Expr, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q names no series", q.Where, q.Expr)
		}
		for _, n := range names {
			if !strings.HasPrefix(n, "fastlimit_") {
				t.Errorf("%s: %s is not a FastLimit series (the dashboard reads the admin listener's /metrics)", q.Where, n)
			}
		}
	}
}

// TestChartRules loads the Helm chart's default rules (values.yaml's
// rules.defaultFiles) with FastLimit's loader and with envoyproxy/ratelimit.
func TestChartRules(t *testing.T) {
	var values struct {
		Rules struct {
			Files map[string]string `yaml:"defaultFiles"`
		} `yaml:"rules"`
	}
	if err := yaml.Unmarshal(files.Read(t, "../charts/fastlimit/values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	in := map[string][]byte{}
	for name, body := range values.Rules.Files {
		in[name] = []byte(body)
	}
	loaded, err := rules.Parse(in)
	if err != nil {
		t.Fatalf("the chart's rules do not load: %v", err)
	}
	if len(loaded.Set.Domains()) == 0 {
		t.Error("the chart's rules have no domain")
	}
	refserver.Bin(t)
	loadsOnReference(t, "the chart's rules", values.Rules.Files)
}
