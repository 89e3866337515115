package charttest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
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
	wantRes := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	if *job.Spec.ActiveDeadlineSeconds != 120 || !reflect.DeepEqual(c.Resources, wantRes) {
		t.Errorf("check deadline %ds, resources %+v; want values.yaml's", *job.Spec.ActiveDeadlineSeconds, c.Resources)
	}

	// rules.check's deadline and resources, as given (merged over the defaults).
	o = mustRender(t, map[string]any{"rules": map[string]any{"check": map[string]any{"activeDeadlineSeconds": 600,
		"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "64Mi"}, "limits": map[string]any{"cpu": "1", "memory": "256Mi"}}}}})
	job = only(t, o.jobs, name)
	wantRes = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	if res := job.Spec.Template.Spec.Containers[0].Resources; *job.Spec.ActiveDeadlineSeconds != 600 || !reflect.DeepEqual(res, wantRes) {
		t.Errorf("check deadline %ds, resources %+v; want rules.check's 600 s and %+v", *job.Spec.ActiveDeadlineSeconds, res, wantRes)
	}
	if res := container(t, o).Resources; reflect.DeepEqual(res, wantRes) {
		t.Error("rules.check.resources reached FastLimit's container")
	}

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
	bin := buildFastlimit(t)
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
			root := mountConfigMap(t, only(t, o.configMaps, fullname+"-rules-check").Data, c.VolumeMounts[0].MountPath)
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
// /healthcheck and one decision: tests.request, or else a descriptor of
// the rules the chart renders, whichever rules those are; with an
// existing ConfigMap, which the chart cannot read, and no request, the
// health check alone.
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
	for _, want := range []string{`"$URL/healthcheck"`, `"$URL/json"`, `-d "$REQUEST"`, "200|429", `[ -z "$REQUEST" ]`} {
		if !strings.Contains(script, want) {
			t.Errorf("test script lacks %s:\n%s", want, script)
		}
	}
	if c.Image != "curlimages/curl:8.11.1" {
		t.Errorf("test image %s", c.Image)
	}
	notSelected(t, o, "test pod", pod.Labels)

	api := "domain: api\ndescriptors:\n  - key: path\n    value: /v1/orders\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string // the request's domain, key and value
	}{
		{"default rules", nil, "example remote_address=helm-test"},
		{"rules.files", map[string]any{"rules": map[string]any{"files": map[string]any{"api.yaml": api}}}, "api path=/v1/orders"},
		// The first file by name, and one without descriptors.
		{"two files", map[string]any{"rules": map[string]any{"files": map[string]any{"web.yml": api, "auth.yaml": "domain: auth\n"}}},
			"auth helm-test=helm-test"},
		// A file that names no domain (the rules check refuses it) is passed over.
		{"a file without domain", map[string]any{"rules": map[string]any{"files": map[string]any{"a.yaml": "0.25: test-domain\n", "b.yaml": api}}},
			"api path=/v1/orders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := mustRender(t, tc.vals)
			req := testRequest(t, o)
			if got := req.Domain + " " + req.Descriptors[0].Entries[0].Key + "=" + req.Descriptors[0].Entries[0].Value; got != tc.want {
				t.Errorf("request %+v, want %s", req, tc.want)
			}
			if !rulesHave(t, only(t, o.configMaps, fullname+"-rules").Data, req.Domain) {
				t.Errorf("request of domain %q, which no file of the rules ConfigMap names", req.Domain)
			}
		})
	}

	// The values given, as they are.
	own := `{"domain":"edge","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`
	o = mustRender(t, map[string]any{"tests": map[string]any{"image": map[string]any{"repository": "reg.example/tools/curl", "tag": "8.12.0"}, "request": own}})
	c = only(t, o.pods, fullname+"-test").Spec.Containers[0]
	if c.Image != "reg.example/tools/curl:8.12.0" || env(c)["REQUEST"] != own {
		t.Errorf("test image %s, REQUEST %q; want tests.image and tests.request", c.Image, env(c)["REQUEST"])
	}
	o = mustRender(t, map[string]any{"rules": map[string]any{"existingConfigMap": "my-rules"}})
	if r := env(only(t, o.pods, fullname+"-test").Spec.Containers[0])["REQUEST"]; r != "" {
		t.Errorf("with rules.existingConfigMap, REQUEST %q: the chart cannot know those rules", r)
	}
	o = mustRender(t, map[string]any{"rules": map[string]any{"existingConfigMap": "my-rules"}, "tests": map[string]any{"request": own}})
	if r := env(only(t, o.pods, fullname+"-test").Spec.Containers[0])["REQUEST"]; r != own {
		t.Errorf("with rules.existingConfigMap and tests.request, REQUEST %q", r)
	}
}

// TestHelmTestRuns runs the test pod's script (sh and curl, as in its
// image) against the server built from this checkout, started with the
// Deployment's variables on the ConfigMap's rules: it passes, and the
// decision it asks is of a rule with a limit (currentLimit in the answer),
// not of a domain the server has no rules for. With no request, the
// health check alone passes.
func TestHelmTestRuns(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	bin := buildFastlimit(t)
	api := "domain: api\ndescriptors:\n  - key: path\n    value: /v1/orders\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	for _, tc := range []struct {
		name string
		vals map[string]any
		out  []string
	}{
		{"default rules", nil, []string{"OK", `"domain":"example"`, `"currentLimit"`, "POST /json: 200"}},
		{"rules.files", map[string]any{"rules": map[string]any{"files": map[string]any{"api.yaml": api}}},
			[]string{`"domain":"api"`, `"currentLimit":{"requestsPerUnit":5`, "POST /json: 200"}},
		{"no request", map[string]any{"rules": map[string]any{"existingConfigMap": "my-rules"}}, []string{"OK", "no decision asked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := mustRender(t, tc.vals)
			server := container(t, o)
			rules := map[string]string{"api.yaml": api} // my-rules
			if cm, ok := o.configMaps[fullname+"-rules"]; ok {
				rules = cm.Data
			}
			root := mountConfigMap(t, rules, server.VolumeMounts[0].MountPath)
			httpPort := freePort(t)
			ports := map[string]string{"PORT": httpPort, "GRPC_PORT": freePort(t), "DEBUG_PORT": freePort(t), "DEBUG_HOST": "127.0.0.1"}
			cmd := exec.Command(bin)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			for k, v := range env(server) {
				switch {
				case ports[k] != "":
					v = ports[k]
				case k == "RUNTIME_ROOT":
					v = filepath.Join(root, v)
				}
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			var log strings.Builder
			cmd.Stdout, cmd.Stderr = &log, &log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}()
			url := "http://127.0.0.1:" + httpPort
			waitHealthy(t, url+"/healthcheck", &log)

			c := only(t, o.pods, fullname+"-test").Spec.Containers[0]
			script := exec.Command(c.Command[0], c.Command[1:]...)
			script.Env = []string{"PATH=" + os.Getenv("PATH"), "URL=" + url, "REQUEST=" + env(c)["REQUEST"]}
			out, err := script.CombinedOutput()
			if err != nil {
				t.Fatalf("test script: %v\n%s", err, out)
			}
			for _, want := range tc.out {
				if !strings.Contains(string(out), want) {
					t.Errorf("test script output lacks %s:\n%s", want, out)
				}
			}
		})
	}
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
	checkAlerts(t, alerts, `{namespace="`+namespace+`", service="`+fullname+`"}`)
	if alerts["Mine"] != "vector(1)" {
		t.Errorf("additional rule %q, want prometheusRule.additionalRules' vector(1)", alerts["Mine"])
	}

	// A selector of the series' own labels, and another for.
	o = mustRender(t, map[string]any{"prometheusRule": map[string]any{"enabled": true,
		"selector": `job="fastlimit", cluster=~"eu-.*"`, "for": "15m"}})
	pr = only(t, o.prometheusRules, fullname)
	alerts = map[string]string{}
	for _, r := range pr.Spec.Groups[0].Rules {
		alerts[r.Alert] = r.Expr.String()
		if r.For == nil || *r.For != "15m" {
			t.Errorf("alert %s: for %v, want prometheusRule.for 15m", r.Alert, r.For)
		}
		if strings.Contains(r.Expr.String(), "namespace=") {
			t.Errorf("alert %s: %q keeps the default selector", r.Alert, r.Expr.String())
		}
	}
	if len(alerts) != 3 {
		t.Errorf("alerts %q", alerts)
	}
	checkAlerts(t, alerts, `{job="fastlimit", cluster=~"eu-.*"}`)
}

// checkAlerts checks the chart's alerts select their series with sel.
func checkAlerts(t *testing.T, alerts map[string]string, sel string) {
	t.Helper()
	for alert, want := range map[string]string{
		"FastLimitRulesReloadFailed": "fastlimit_config_last_reload_successful" + sel + ") == 0",
		"FastLimitStoreErrors":       "rate(fastlimit_store_errors_total" + sel + "[5m])",
		"FastLimitStoreBreakerOpen":  "fastlimit_store_breaker_state" + sel + ") > 0",
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

// helmTestRequest is the request of the helm test pod, as POST /json takes it.
type helmTestRequest struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Entries []struct{ Key, Value string } `json:"entries"`
	} `json:"descriptors"`
}

// testRequest decodes the helm test pod's REQUEST: one descriptor of one entry.
func testRequest(t *testing.T, o *objects) helmTestRequest {
	t.Helper()
	raw := env(only(t, o.pods, fullname+"-test").Spec.Containers[0])["REQUEST"]
	var req helmTestRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil || len(req.Descriptors) != 1 || len(req.Descriptors[0].Entries) != 1 {
		t.Fatalf("REQUEST %q: %v, want one descriptor of one entry", raw, err)
	}
	return req
}

// rulesHave reports whether a rules file of data names domain.
func rulesHave(t *testing.T, data map[string]string, domain string) bool {
	t.Helper()
	for _, body := range data {
		var f struct {
			Domain string `json:"domain"`
		}
		if yaml.Unmarshal([]byte(body), &f) == nil && f.Domain == domain {
			return true
		}
	}
	return false
}

// buildFastlimit builds the binary of this checkout.
func buildFastlimit(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fastlimit")
	build := exec.Command("go", "build", "-o", bin, "./cmd/server")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// mountConfigMap writes a ConfigMap's files at mount under a new
// directory, the pod's filesystem, and returns that directory.
func mountConfigMap(t *testing.T, data map[string]string, mount string) string {
	t.Helper()
	root := t.TempDir()
	for f, body := range data {
		p := filepath.Join(root, mount, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// waitHealthy polls url every 50 ms, up to 30 s, until it answers 200.
func waitHealthy(t *testing.T, url string, log fmt.Stringer) {
	t.Helper()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); <-poll.C {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatalf("%s never answered 200; server log:\n%s", url, log)
}
