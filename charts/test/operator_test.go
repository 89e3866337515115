package charttest

import (
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// adminToken is the token the operator API tests put in the Secret.
const adminToken = "oncall-0123456789abcdef"

// withTokens are values that publish the operators' API with a token
// Secret.
func withTokens(enabled bool) map[string]any {
	return map[string]any{"operatorAPI": map[string]any{"enabled": enabled, "tokenSecret": "fastlimit-admin"}}
}

// TestOperatorAPIValues: off by default, the admin listener stays on
// 127.0.0.1 and no Service publishes it; operatorAPI.enabled binds it on
// the pod's address and adds a headless Service that reaches every
// replica, ready or not, with the names it answers to; tokenSecret
// mounts the Secret whole, optional, and names the file.
func TestOperatorAPIValues(t *testing.T) {
	o := mustRender(t, nil)
	if len(o.services) != 1 {
		t.Errorf("services %q: want the chart's one", o.kinds)
	}
	c := container(t, o)
	for _, p := range c.Ports {
		if p.ContainerPort == 6070 {
			t.Errorf("container port %s (%d): the admin listener is on loopback", p.Name, p.ContainerPort)
		}
	}
	if e := env(c); e["DEBUG_HOST"] != "127.0.0.1" || e["ADMIN_TOKEN_FILE"] != "" || e["ADMIN_ALLOWED_HOSTS"] != "" {
		t.Errorf("env %v", e)
	}

	// A token Secret alone: port-forward writes.
	o = mustRender(t, withTokens(false))
	c = container(t, o)
	if e := env(c); e["DEBUG_HOST"] != "127.0.0.1" || e["ADMIN_TOKEN_FILE"] != "/etc/fastlimit/admin-tokens/tokens" || len(o.services) != 1 {
		t.Errorf("tokenSecret alone: env %v, %q", e, o.kinds)
	}
	checkTokenVolume(t, o, "fastlimit-admin")

	o = mustRender(t, map[string]any{"operatorAPI": map[string]any{"enabled": true, "tokenSecret": "ops", "tokenSecretKey": "admin.txt",
		"clusterDomain": "corp.example."}})
	c = container(t, o)
	e := env(c)
	wantHosts := "rl-fastlimit-admin,rl-fastlimit-admin.limits,rl-fastlimit-admin.limits.svc,rl-fastlimit-admin.limits.svc.corp.example"
	if e["DEBUG_HOST"] != "0.0.0.0" || e["ADMIN_TOKEN_FILE"] != "/etc/fastlimit/admin-tokens/admin.txt" || e["ADMIN_ALLOWED_HOSTS"] != wantHosts {
		t.Errorf("operatorAPI.enabled: env %v", e)
	}
	checkTokenVolume(t, o, "ops")
	svc := only(t, o.services, fullname+"-admin")
	dep := only(t, o.deployments, fullname)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses || len(svc.Spec.Ports) != 1 ||
		svc.Spec.Ports[0].Name != "http-admin" || svc.Spec.Ports[0].Port != 6070 || svc.Spec.Ports[0].TargetPort.StrVal != "http-admin" {
		t.Errorf("admin Service %+v: want headless, not-ready addresses published, http-admin 6070", svc.Spec)
	}
	if !maps.Equal(svc.Spec.Selector, dep.Spec.Selector.MatchLabels) {
		t.Errorf("admin Service selects %v, the Deployment's pods are %v", svc.Spec.Selector, dep.Spec.Selector.MatchLabels)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http-admin" && p.ContainerPort == 6070 }) {
		t.Errorf("container ports %+v lack http-admin", c.Ports)
	}
	checkService(t, o, []string{"http", "grpc", "http-metrics"}) // the main Service: never the admin port
}

// checkTokenVolume checks the token Secret's volume: the Secret whole
// (an edit reaches the pod), optional (removed, the pod still starts),
// mounted read-only where ADMIN_TOKEN_FILE points.
func checkTokenVolume(t *testing.T, o *objects, secret string) {
	t.Helper()
	pod := only(t, o.deployments, fullname).Spec.Template.Spec
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "admin-tokens" })
	if i < 0 || pod.Volumes[i].Secret == nil || pod.Volumes[i].Secret.SecretName != secret || pod.Volumes[i].Secret.Items != nil ||
		pod.Volumes[i].Secret.Optional == nil || !*pod.Volumes[i].Secret.Optional {
		t.Errorf("volumes %+v: want Secret %s whole and optional", pod.Volumes, secret)
		return
	}
	c := pod.Containers[0]
	j := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "admin-tokens" })
	if j < 0 || c.VolumeMounts[j].SubPath != "" || !c.VolumeMounts[j].ReadOnly ||
		filepath.Dir(env(c)["ADMIN_TOKEN_FILE"]) != c.VolumeMounts[j].MountPath {
		t.Errorf("mounts %+v, ADMIN_TOKEN_FILE %s", c.VolumeMounts, env(c)["ADMIN_TOKEN_FILE"])
	}
}

// TestOperatorAPIRefusals: on the cluster network without a way to
// authorize, the operators' API would answer no one: the chart refuses
// it; debugHost, which it replaces, names what does.
func TestOperatorAPIRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"enabled without tokens", map[string]any{"operatorAPI": map[string]any{"enabled": true}}, "operatorAPI.enabled needs operatorAPI.tokenSecret"},
		{"debugHost", map[string]any{"debugHost": "0.0.0.0"}, "debugHost is gone"},
	} {
		if _, err := render(t, tc.vals); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	certs := map[string]any{"operatorAPI": map[string]any{"enabled": true}, "env": map[string]any{"ADMIN_TLS_CLIENT_CA": "/tls/ca.pem"}}
	if _, err := render(t, certs); err != nil {
		t.Errorf("enabled with client certificates: %v", err)
	}
}

// TestPublishedPortsNeedAuthorization runs the server built from this
// checkout with the Deployment's variables (ports moved to free ones,
// addresses kept), and asks every port each Service of the render
// publishes for what reveals identifiers: with the chart's defaults, and
// the production values, no published port answers /v1/top, /v1/usage,
// /v1/status or the page; Prometheus' port answers /metrics. With
// operatorAPI.enabled, the headless Service's port answers them with a
// token of the Secret only, and to its own names.
func TestPublishedPortsNeedAuthorization(t *testing.T) {
	bin := buildFastlimit(t)
	reads := []struct{ path, accept string }{
		{"/v1/top", ""}, {"/v1/top?domain=example", ""}, {"/v1/usage?domain=example&descriptor=remote_address=1.2.3.4", ""},
		{"/v1/status", ""}, {"/", "text/html"},
	}
	for _, tc := range []struct {
		name  string
		vals  map[string]any
		admin bool // the operators' API is published
	}{
		{"defaults", nil, false},
		{"production", func() map[string]any {
			v := production()
			delete(v, "redis") // one replica on the embedded store is enough here
			v["replicaCount"] = 1
			return v
		}(), false},
		{"operator API", withTokens(true), true},
		// The RLQS port is the child's gRPC, which the server binds.
		{"rlqs in a process", map[string]any{"rlqs": map[string]any{"enabled": true, "process": true}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := mustRender(t, tc.vals)
			ports := startRendered(t, bin, o)
			var published []string
			for _, svc := range o.services {
				for _, p := range svc.Spec.Ports {
					local, ok := ports[p.TargetPort.StrVal]
					if !ok {
						t.Fatalf("Service %s port %s targets %s, which the server does not bind", svc.Name, p.Name, p.TargetPort.StrVal)
					}
					published = append(published, p.Name)
					base := "http://127.0.0.1:" + local
					for _, r := range reads {
						code, body := get(base+r.path, r.accept)
						if code == http.StatusOK {
							t.Errorf("Service %s port %s answers %s without authorization:\n%.300s", svc.Name, p.Name, r.path, body)
						}
						if p.Name != "http-admin" {
							continue
						}
						if code, body := get(base+r.path, r.accept, "Authorization", "Bearer "+adminToken); code != http.StatusOK {
							t.Errorf("Service %s port %s, %s with a token: %d %.300s", svc.Name, p.Name, r.path, code, body)
						}
						if code, _ := get(base+r.path, r.accept, "Authorization", "Bearer "+adminToken,
							"Host", fullname+"-admin."+namespace+".svc:6070"); code != http.StatusOK {
							t.Errorf("Service %s port %s, %s by its Service's name: %d", svc.Name, p.Name, r.path, code)
						}
					}
				}
			}
			if code, _ := get("http://127.0.0.1:"+ports["http-metrics"]+"/metrics", ""); code != http.StatusOK {
				t.Errorf("the metrics port: %d", code)
			}
			if slices.Contains(published, "http-admin") != tc.admin {
				t.Errorf("published ports %q: the admin port published %v, want %v", published, !tc.admin, tc.admin)
			}
		})
	}
}

// startRendered runs bin with the rendered Deployment's variables, its
// rules ConfigMap and its token Secret (holding adminToken) mounted
// under a temporary root, each port moved to a free one on the address
// the chart gives; it returns the local port of each container port, by
// name.
func startRendered(t *testing.T, bin string, o *objects) map[string]string {
	t.Helper()
	c := container(t, o)
	root := mountConfigMap(t, only(t, o.configMaps, fullname+"-rules").Data, c.VolumeMounts[0].MountPath)
	e := env(c)
	if f := e["ADMIN_TOKEN_FILE"]; f != "" {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("oncall:"+adminToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	moved := map[string]string{} // the chart's port -> a free one
	move := func(port string) string {
		if moved[port] == "" {
			moved[port] = freePort(t)
		}
		return moved[port]
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range e {
		switch k {
		case "PORT", "GRPC_PORT", "DEBUG_PORT":
			v = move(v)
		case "METRICS_ADDR", "PROMETHEUS_ADDR", "RLQS_ADDR":
			host, port, err := net.SplitHostPort(v)
			if err != nil {
				t.Fatalf("%s=%s: %v", k, v, err)
			}
			v = net.JoinHostPort(host, move(port))
		case "RUNTIME_ROOT", "ADMIN_TOKEN_FILE":
			v = filepath.Join(root, v)
		case "REDIS_URL":
			continue
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitHealthy(t, "http://127.0.0.1:"+moved[e["PORT"]]+"/healthcheck", &log)
	ports := map[string]string{}
	for _, p := range c.Ports {
		if local := moved[itoa(p.ContainerPort)]; local != "" {
			ports[p.Name] = local
		}
	}
	return ports
}

// get asks url, with Accept accept and the headers given as name, value
// pairs ("Host" sets the request's Host), and returns the status and
// body; a connection that answers no HTTP is status 0.
func get(url, accept string, headers ...string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
