package charttest

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart, relative to this package.
const chartDir = "../fastlimit"

const (
	releaseName = "rl"
	namespace   = "limits"
)

// objects is a rendered chart, decoded: one map per kind, by name.
type objects struct {
	deployments     map[string]*appsv1.Deployment
	services        map[string]*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	pdbs            map[string]*policyv1.PodDisruptionBudget
	serviceMonitors map[string]*monitoringv1.ServiceMonitor
	serviceAccounts map[string]*corev1.ServiceAccount
	hpas            map[string]*autoscalingv2.HorizontalPodAutoscaler
	jobs            map[string]*batchv1.Job
	pods            map[string]*corev1.Pod
	prometheusRules map[string]*monitoringv1.PrometheusRule
	kinds           []string // "Kind/name" of every object, in order
}

// testImage is the image the tests name: the chart requires one.
const testImage = "registry.example.com/fastlimit"

// render renders the chart with vals as `helm template` does (a client-only
// dry-run install) and returns the manifest, hooks included. Without an
// image in vals, it names testImage.
func render(t *testing.T, vals map[string]any) (string, error) {
	t.Helper()
	if _, ok := vals["image"]; !ok {
		vals = maps.Clone(vals)
		if vals == nil {
			vals = map[string]any{}
		}
		vals["image"] = map[string]any{"repository": testImage}
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.DryRunOption = true, "true"
	install.ClientOnly, install.Replace = true, true
	install.ReleaseName, install.Namespace = releaseName, namespace
	install.APIVersions = []string{"monitoring.coreos.com/v1"}
	rel, err := install.Run(ch, vals)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		fmt.Fprintf(&b, "\n---\n%s\n", h.Manifest)
	}
	return b.String(), nil
}

// decode splits a manifest and decodes each document strictly (unknown
// and duplicate fields are errors) into the type of its kind; a kind the
// chart should not make is an error.
func decode(manifest string) (*objects, error) {
	o := &objects{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, serviceMonitors: map[string]*monitoringv1.ServiceMonitor{},
		serviceAccounts: map[string]*corev1.ServiceAccount{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		jobs: map[string]*batchv1.Job{}, pods: map[string]*corev1.Pod{}, prometheusRules: map[string]*monitoringv1.PrometheusRule{},
	}
	docs := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	for _, k := range keys {
		doc := docs[k]
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var tm struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		into, ok := o.decoders()[tm.APIVersion+" "+tm.Kind]
		err := fmt.Errorf("unexpected object %s %s", tm.APIVersion, tm.Kind)
		if ok {
			err = into(doc, tm.Metadata.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		o.kinds = append(o.kinds, tm.Kind+"/"+tm.Metadata.Name)
	}
	return o, nil
}

// decoders decode a document of each kind the chart makes into o, by
// "apiVersion kind".
func (o *objects) decoders() map[string]func(doc, name string) error {
	return map[string]func(doc, name string) error{
		"apps/v1 Deployment":            into(o.deployments),
		"v1 Service":                    into(o.services),
		"v1 ConfigMap":                  into(o.configMaps),
		"v1 Secret":                     into(o.secrets),
		"policy/v1 PodDisruptionBudget": into(o.pdbs),
		"monitoring.coreos.com/v1 ServiceMonitor": into(o.serviceMonitors),
		"v1 ServiceAccount":                       into(o.serviceAccounts),
		"autoscaling/v2 HorizontalPodAutoscaler":  into(o.hpas),
		"batch/v1 Job":                            into(o.jobs),
		"v1 Pod":                                  into(o.pods),
		"monitoring.coreos.com/v1 PrometheusRule": into(o.prometheusRules),
	}
}

func into[T any](m map[string]*T) func(doc, name string) error {
	return func(doc, name string) error { return decodeInto(doc, m, name) }
}

func decodeInto[T any](doc string, into map[string]*T, name string) error {
	v := new(T)
	if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
		return err
	}
	if _, dup := into[name]; dup {
		return fmt.Errorf("two objects named %q", name)
	}
	into[name] = v
	return nil
}

// mustRender renders and decodes, failing the test on any error.
func mustRender(t *testing.T, vals map[string]any) *objects {
	t.Helper()
	m, err := render(t, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	o, err := decode(m)
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, m)
	}
	for _, list := range [][]metav1.Object{metas(o.deployments), metas(o.services), metas(o.configMaps),
		metas(o.secrets), metas(o.pdbs), metas(o.serviceMonitors), metas(o.serviceAccounts), metas(o.hpas),
		metas(o.jobs), metas(o.pods), metas(o.prometheusRules)} {
		for _, obj := range list {
			if obj.GetNamespace() != namespace {
				t.Errorf("%s: namespace %q, want %q", obj.GetName(), obj.GetNamespace(), namespace)
			}
			if obj.GetLabels()["app.kubernetes.io/instance"] != releaseName {
				t.Errorf("%s: labels %v lack the release", obj.GetName(), obj.GetLabels())
			}
		}
	}
	return o
}

func metas[T any, P interface {
	*T
	metav1.Object
}](m map[string]*T) []metav1.Object {
	out := make([]metav1.Object, 0, len(m))
	for _, v := range m {
		out = append(out, P(v))
	}
	return out
}

// env returns a container's plain variables, and the names of those set
// from a Secret as "secret/<name>/<key>".
func env(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			m[e.Name] = "secret/" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom != nil:
			m[e.Name] = "valueFrom"
		default:
			m[e.Name] = e.Value
		}
	}
	return m
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func only[T any](t *testing.T, m map[string]*T, name string) *T {
	t.Helper()
	v, ok := m[name]
	if !ok {
		t.Fatalf("no object %q (have %d of its kind)", name, len(m))
	}
	return v
}

// unmarshalFile decodes a YAML or JSON file into v.
func unmarshalFile(t *testing.T, path string, v any) {
	t.Helper()
	if err := yaml.Unmarshal(readFile(t, path), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// lintChart runs Helm's linter with vals and returns its messages of
// warnings and errors.
func lintChart(t *testing.T, vals map[string]any) []string {
	t.Helper()
	var out []string
	for _, m := range lint.All(chartDir, vals, namespace, true).Messages {
		if m.Severity >= support.WarningSev {
			out = append(out, m.Error())
		}
	}
	return out
}

func equalBytes(a, b []byte) bool { return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) }
