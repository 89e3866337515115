package charttest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestRulesCheckHook: before Helm applies the rules, a hook Job runs
// `fastlimit check` on them, mounted where the pods mount them, with the
// pods' variables; its ConfigMap is made first, and both go once they
// passed.
func TestRulesCheckHook(t *testing.T) {
	o := mustRender(t, map[string]any{"env": map[string]any{"MERGE_DOMAIN_CONFIG": "true"}})
	name := fullname + "-rules-check"
	job, cm := only(t, o.jobs, name), only(t, o.configMaps, name)
	for what, ann := range map[string]map[string]string{"Job": job.Annotations, "ConfigMap": cm.Annotations} {
		if ann["helm.sh/hook"] != "pre-install,pre-upgrade" || ann["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s annotations %v", what, ann)
		}
	}
	cw, _ := strconv.Atoi(cm.Annotations["helm.sh/hook-weight"])
	jw, _ := strconv.Atoi(job.Annotations["helm.sh/hook-weight"])
	if cw >= jw {
		t.Errorf("ConfigMap weight %s, Job's %s: the ConfigMap must come first", cm.Annotations["helm.sh/hook-weight"], job.Annotations["helm.sh/hook-weight"])
	}
	if !reflect.DeepEqual(cm.Data, only(t, o.configMaps, fullname+"-rules").Data) {
		t.Error("the rules checked are not the rules installed")
	}
	if *job.Spec.BackoffLimit != 0 || job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("backoffLimit %d, restartPolicy %s: a failed check must fail the hook at once", *job.Spec.BackoffLimit, job.Spec.Template.Spec.RestartPolicy)
	}
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	server := container(t, o)
	if !slices.Equal(c.Args, []string{"check"}) || len(c.Command) != 0 || c.Image != server.Image {
		t.Errorf("check container %s %q %q, want the server's image with args [check]", c.Image, c.Command, c.Args)
	}
	je, se := env(c), env(server)
	for _, k := range []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES", "MERGE_DOMAIN_CONFIG"} {
		if je[k] != se[k] || je[k] == "" {
			t.Errorf("check env %s = %q, the server's %q", k, je[k], se[k])
		}
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != server.VolumeMounts[0].MountPath ||
		pod.Volumes[0].ConfigMap == nil || pod.Volumes[0].ConfigMap.Name != name {
		t.Errorf("check mounts %+v of %+v, want ConfigMap %s at %s", c.VolumeMounts, pod.Volumes, name, server.VolumeMounts[0].MountPath)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || pod.ServiceAccountName != "" {
		t.Errorf("check pod ServiceAccount %q (automount %v): hooks run before the release's own exists", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	notSelected(t, o, "rules check", job.Spec.Template.Labels)

	o = mustRender(t, map[string]any{"rules": map[string]any{"existingConfigMap": "my-rules"}})
	job = only(t, o.jobs, name)
	if len(o.configMaps) != 0 || job.Spec.Template.Spec.Volumes[0].ConfigMap.Name != "my-rules" {
		t.Errorf("with existingConfigMap: objects %q, check mounts %+v", o.kinds, job.Spec.Template.Spec.Volumes)
	}
	if o := mustRender(t, map[string]any{"rules": map[string]any{"check": map[string]any{"enabled": false}}}); len(o.jobs) != 0 {
		t.Errorf("rules.check.enabled false: objects %q", o.kinds)
	}
}

// TestRulesCheckHookRuns runs the Job's command as it would run: the
// binary built from this checkout, the Job's arguments and variables, the
// ConfigMap's files at the Job's mount path. The chart's rules pass; a
// file with an error fails with its file and line.
func TestRulesCheckHookRuns(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fastlimit")
	build := exec.Command("go", "build", "-o", bin, "./cmd/server")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bad := "domain: api\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n"
	for _, tc := range []struct {
		name string
		vals map[string]any
		code int
		out  string
	}{
		{"default rules", nil, 0, "1 files, 1 domains, 2 limits: OK"},
		{"bad rules", map[string]any{"rules": map[string]any{"files": map[string]any{"api.yaml": bad}}}, 1,
			"api.yaml:5: invalid rate limit unit 'fortnight'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := mustRender(t, tc.vals)
			job := only(t, o.jobs, fullname+"-rules-check")
			c := job.Spec.Template.Spec.Containers[0]
			root := t.TempDir() // the pod's filesystem
			for f, body := range only(t, o.configMaps, fullname+"-rules-check").Data {
				p := filepath.Join(root, c.VolumeMounts[0].MountPath, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(bin, c.Args...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			for _, e := range c.Env {
				if e.Name == "RUNTIME_ROOT" {
					e.Value = filepath.Join(root, e.Value)
				}
				cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
			}
			out, _ := cmd.CombinedOutput()
			if cmd.ProcessState.ExitCode() != tc.code || !strings.Contains(string(out), tc.out) {
				t.Errorf("check exit %d:\n%s\nwant exit %d with %q", cmd.ProcessState.ExitCode(), out, tc.code, tc.out)
			}
		})
	}
}

// TestHelmTest: `helm test` runs a pod that asks the Service's
// /healthcheck and one decision, the default rules' domain.
func TestHelmTest(t *testing.T) {
	o := mustRender(t, nil)
	pod := only(t, o.pods, fullname+"-test")
	if pod.Annotations["helm.sh/hook"] != "test" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever ||
		pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("test pod %+v", pod.ObjectMeta)
	}
	c := pod.Spec.Containers[0]
	svc := only(t, o.services, fullname)
	var httpPort int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "http" {
			httpPort = p.Port
		}
	}
	e := env(c)
	if want := "http://" + svc.Name + "." + namespace + ".svc:" + strconv.Itoa(int(httpPort)); e["URL"] != want {
		t.Errorf("URL %q, want the Service's http port %s", e["URL"], want)
	}
	script := strings.Join(c.Command, " ")
	for _, want := range []string{`"$URL/healthcheck"`, `"$URL/json"`, `-d "$REQUEST"`, "200|429"} {
		if !strings.Contains(script, want) {
			t.Errorf("test script lacks %s:\n%s", want, script)
		}
	}
	var req struct {
		Domain      string `json:"domain"`
		Descriptors []struct {
			Entries []struct{ Key, Value string } `json:"entries"`
		} `json:"descriptors"`
	}
	if err := json.Unmarshal([]byte(e["REQUEST"]), &req); err != nil || len(req.Descriptors) != 1 {
		t.Fatalf("REQUEST %q: %v", e["REQUEST"], err)
	}
	if rules := only(t, o.configMaps, fullname+"-rules").Data["example.yaml"]; !strings.Contains(rules, "domain: "+req.Domain+"\n") ||
		!strings.Contains(rules, "key: "+req.Descriptors[0].Entries[0].Key+"\n") {
		t.Errorf("REQUEST %q is not of the default rules", e["REQUEST"])
	}
	if !strings.HasPrefix(c.Image, "curlimages/curl:") {
		t.Errorf("test image %s", c.Image)
	}
	notSelected(t, o, "test pod", pod.Labels)
}

// TestPrometheusRule: off by default; on, it alerts on a failed reload,
// store errors and an open breaker, on series FastLimit exports, selected
// as the ServiceMonitor's targets are labelled.
func TestPrometheusRule(t *testing.T) {
	if o := mustRender(t, nil); len(o.prometheusRules) != 0 {
		t.Errorf("a PrometheusRule by default: %q", o.kinds)
	}
	extra := map[string]any{"alert": "Mine", "expr": "vector(1)"}
	o := mustRender(t, map[string]any{"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "kp"},
		"additionalRules": []any{extra}}})
	pr := only(t, o.prometheusRules, fullname)
	if pr.Labels["release"] != "kp" || len(pr.Spec.Groups) != 1 {
		t.Fatalf("PrometheusRule %+v", pr)
	}
	documented := string(readFile(t, "../../docs/metrics.md"))
	metric := regexp.MustCompile(`fastlimit_[a-z_]+`)
	alerts := map[string]string{}
	for _, r := range pr.Spec.Groups[0].Rules {
		alerts[r.Alert] = r.Expr.String()
		for _, m := range metric.FindAllString(r.Expr.String(), -1) {
			if !strings.Contains(documented, "| `"+m+"` |") {
				t.Errorf("alert %s: %s is no series of docs/metrics.md", r.Alert, m)
			}
		}
		if r.Alert != "Mine" && (r.For == nil || *r.For != "5m" || r.Labels["severity"] == "" || r.Annotations["summary"] == "") {
			t.Errorf("alert %s: for %v, labels %v, annotations %v", r.Alert, r.For, r.Labels, r.Annotations)
		}
	}
	sel := `{namespace="` + namespace + `", service="` + fullname + `"}`
	for alert, want := range map[string]string{
		"FastLimitRulesReloadFailed": "fastlimit_config_last_reload_successful" + sel + ") == 0",
		"FastLimitStoreErrors":       "rate(fastlimit_store_errors_total" + sel + "[5m])",
		"FastLimitStoreBreakerOpen":  "fastlimit_store_breaker_state" + sel + ") > 0",
		"Mine":                       "vector(1)",
	} {
		if !strings.Contains(alerts[alert], want) {
			t.Errorf("alert %s: %q, want it to contain %q", alert, alerts[alert], want)
		}
	}
}

// notSelected fails if the Deployment's selector (and so the Service's and
// the PodDisruptionBudget's) selects a pod of these labels.
func notSelected(t *testing.T, o *objects, what string, podLabels map[string]string) {
	t.Helper()
	sel := labels.SelectorFromSet(only(t, o.deployments, fullname).Spec.Selector.MatchLabels)
	if sel.Matches(labels.Set(podLabels)) {
		t.Errorf("%s labels %v match the Deployment's selector: the Service would send it requests", what, podLabels)
	}
}
