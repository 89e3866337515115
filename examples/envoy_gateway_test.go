package examples_test

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

const envoyGatewayDir = "envoy-gateway"

// Envoy Gateway's and Gateway API's resources, as far as the example uses
// them; decoded strictly, so that a misspelt field fails.
type (
	meta struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	}
	envoyGatewayConfig struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Gateway    struct {
			ControllerName string `yaml:"controllerName"`
		} `yaml:"gateway"`
		Logging struct {
			Level map[string]string `yaml:"level"`
		} `yaml:"logging"`
		Provider struct {
			Type       string `yaml:"type"`
			Kubernetes struct {
				RateLimitDeployment struct {
					Replicas  int `yaml:"replicas"`
					Container struct {
						Image string `yaml:"image"`
						Env   []struct {
							Name  string `yaml:"name"`
							Value string `yaml:"value"`
						} `yaml:"env"`
						VolumeMounts []struct {
							Name      string `yaml:"name"`
							MountPath string `yaml:"mountPath"`
							ReadOnly  bool   `yaml:"readOnly"`
						} `yaml:"volumeMounts"`
					} `yaml:"container"`
					Pod struct {
						Volumes []struct {
							Name      string `yaml:"name"`
							ConfigMap struct {
								Name string `yaml:"name"`
							} `yaml:"configMap"`
						} `yaml:"volumes"`
					} `yaml:"pod"`
				} `yaml:"rateLimitDeployment"`
			} `yaml:"kubernetes"`
		} `yaml:"provider"`
		RateLimit struct {
			Backend struct {
				Type  string `yaml:"type"`
				Redis struct {
					URL string `yaml:"url"`
				} `yaml:"redis"`
			} `yaml:"backend"`
		} `yaml:"rateLimit"`
	}
	gatewayClass struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   meta   `yaml:"metadata"`
		Spec       struct {
			ControllerName string `yaml:"controllerName"`
		} `yaml:"spec"`
	}
	gateway struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   meta   `yaml:"metadata"`
		Spec       struct {
			GatewayClassName string `yaml:"gatewayClassName"`
			Listeners        []struct {
				Name     string `yaml:"name"`
				Protocol string `yaml:"protocol"`
				Port     int    `yaml:"port"`
			} `yaml:"listeners"`
		} `yaml:"spec"`
	}
	objectRef struct {
		Group string `yaml:"group"`
		Kind  string `yaml:"kind"`
		Name  string `yaml:"name"`
		Port  int    `yaml:"port"`
	}
	httpRoute struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   meta   `yaml:"metadata"`
		Spec       struct {
			ParentRefs []objectRef `yaml:"parentRefs"`
			Hostnames  []string    `yaml:"hostnames"`
			Rules      []struct {
				Matches []struct {
					Path struct {
						Type  string `yaml:"type"`
						Value string `yaml:"value"`
					} `yaml:"path"`
				} `yaml:"matches"`
				BackendRefs []objectRef `yaml:"backendRefs"`
			} `yaml:"rules"`
		} `yaml:"spec"`
	}
	backendTrafficPolicy struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   meta   `yaml:"metadata"`
		Spec       struct {
			TargetRefs []objectRef `yaml:"targetRefs"`
			RateLimit  struct {
				Type   string `yaml:"type"`
				Global struct {
					Rules []struct {
						ClientSelectors []struct {
							Headers []struct {
								Name  string `yaml:"name"`
								Type  string `yaml:"type"`
								Value string `yaml:"value"`
							} `yaml:"headers"`
						} `yaml:"clientSelectors"`
						Limit struct {
							Requests int    `yaml:"requests"`
							Unit     string `yaml:"unit"`
						} `yaml:"limit"`
					} `yaml:"rules"`
				} `yaml:"global"`
			} `yaml:"rateLimit"`
		} `yaml:"spec"`
	}
)

// TestEnvoyGatewayManifests checks that examples/envoy-gateway hangs
// together: Envoy Gateway runs FastLimit's image as its rate-limit
// service, on the example's Redis; the GatewayClass is Envoy Gateway's;
// the Gateway, HTTPRoute, Service and BackendTrafficPolicy name each other
// right, and the policy is a valid global limit.
func TestEnvoyGatewayManifests(t *testing.T) {
	objs := loadManifestsIn(t, envoyGatewayDir)
	find := func(kind, namespace, name string) *k8sObject {
		t.Helper()
		for _, o := range objs {
			if o.Kind == kind && o.Metadata.Name == name && o.Metadata.Namespace == namespace {
				return o
			}
		}
		t.Fatalf("no %s %s/%s in %s", kind, namespace, name, envoyGatewayDir)
		return nil
	}
	for _, o := range objs {
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			t.Errorf("%s: a document lacks apiVersion, kind or metadata.name", o.file)
		}
		namespaced := o.Kind != "Namespace" && o.Kind != "GatewayClass"
		if namespaced != (o.Metadata.Namespace != "") {
			t.Errorf("%s: %s %s: namespace %q", o.file, o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
	}

	// Envoy Gateway's configuration.
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	decodeNode(t, find("ConfigMap", "envoy-gateway-system", "envoy-gateway-config"), &cm)
	var eg envoyGatewayConfig
	decodeStrictYAML(t, "envoy-gateway.yaml", []byte(cm.Data["envoy-gateway.yaml"]), &eg)
	if eg.APIVersion != "gateway.envoyproxy.io/v1alpha1" || eg.Kind != "EnvoyGateway" || eg.Provider.Type != "Kubernetes" {
		t.Errorf("envoy-gateway.yaml: %s %s, provider %s", eg.APIVersion, eg.Kind, eg.Provider.Type)
	}
	// The image is FastLimit's, the one the Istio example runs.
	image := eg.Provider.Kubernetes.RateLimitDeployment.Container.Image
	var istioImage string
	for _, o := range loadManifests(t) {
		if o.Kind == "Deployment" && o.Metadata.Name == "fastlimit" {
			var dep deployment
			decodeNode(t, o, &dep)
			istioImage = dep.Spec.Template.Spec.Containers[0].Image
		}
	}
	if image == "" || image != istioImage || !strings.Contains(image, "fastlimit") {
		t.Errorf("rateLimitDeployment image %q, want FastLimit's (%q, as in %s)", image, istioImage, istioDir)
	}
	// Redis: host:port of the example's Redis Service.
	be := eg.RateLimit.Backend
	host, port, err := net.SplitHostPort(be.Redis.URL)
	if be.Type != "Redis" || err != nil {
		t.Fatalf("rateLimit.backend %+v: want type Redis and a host:port URL (%v)", be, err)
	}
	name, ns, _ := strings.Cut(strings.TrimSuffix(host, ".svc.cluster.local"), ".")
	var redisSvc service
	decodeNode(t, find("Service", ns, name), &redisSvc)
	if p, _ := strconv.Atoi(port); !slices.ContainsFunc(redisSvc.Spec.Ports, func(sp servicePort) bool { return sp.Port == p }) {
		t.Errorf("Redis URL port %s is not a port of Service %s/%s", port, ns, name)
	}
	checkSelects(t, redisSvc, find("Deployment", ns, name))

	// GatewayClass and Gateway.
	var gc gatewayClass
	decodeNodeStrict(t, find("GatewayClass", "", "eg"), &gc)
	if gc.Spec.ControllerName != eg.Gateway.ControllerName {
		t.Errorf("GatewayClass controllerName %q, want Envoy Gateway's %q", gc.Spec.ControllerName, eg.Gateway.ControllerName)
	}
	var gw gateway
	decodeNodeStrict(t, find("Gateway", "default", "eg"), &gw)
	if gw.Spec.GatewayClassName != gc.Metadata.Name || len(gw.Spec.Listeners) == 0 || gw.Spec.Listeners[0].Protocol != "HTTP" {
		t.Errorf("Gateway %+v: want class %s and an HTTP listener", gw.Spec, gc.Metadata.Name)
	}

	// HTTPRoute to the echo Service.
	var route httpRoute
	decodeNodeStrict(t, find("HTTPRoute", "default", "echo"), &route)
	if len(route.Spec.ParentRefs) != 1 || route.Spec.ParentRefs[0].Name != gw.Metadata.Name {
		t.Errorf("HTTPRoute parentRefs %+v, want Gateway %s", route.Spec.ParentRefs, gw.Metadata.Name)
	}
	for _, r := range route.Spec.Rules {
		for _, b := range r.BackendRefs {
			var svc service
			decodeNode(t, find("Service", route.Metadata.Namespace, b.Name), &svc)
			if !slices.ContainsFunc(svc.Spec.Ports, func(sp servicePort) bool { return sp.Port == b.Port }) {
				t.Errorf("HTTPRoute backendRef %s:%d: no such Service port", b.Name, b.Port)
			}
			checkSelects(t, svc, find("Deployment", route.Metadata.Namespace, b.Name))
		}
	}

	// The global limit.
	var btp backendTrafficPolicy
	decodeNodeStrict(t, find("BackendTrafficPolicy", "default", "echo-global-limit"), &btp)
	if len(btp.Spec.TargetRefs) != 1 || btp.Spec.TargetRefs[0] != (objectRef{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: route.Metadata.Name}) {
		t.Errorf("BackendTrafficPolicy targetRefs %+v, want HTTPRoute %s", btp.Spec.TargetRefs, route.Metadata.Name)
	}
	rl := btp.Spec.RateLimit
	if rl.Type != "Global" || len(rl.Global.Rules) == 0 {
		t.Fatalf("BackendTrafficPolicy rateLimit %+v: want type Global with rules", rl)
	}
	for i, r := range rl.Global.Rules {
		if r.Limit.Requests <= 0 || !slices.Contains([]string{"Second", "Minute", "Hour", "Day", "Month", "Year"}, r.Limit.Unit) {
			t.Errorf("rule %d: limit %+v", i, r.Limit)
		}
		for _, cs := range r.ClientSelectors {
			for _, h := range cs.Headers {
				switch {
				case h.Name == "":
					t.Errorf("rule %d: a header selector without a name", i)
				case h.Type == "Distinct" && h.Value != "":
					t.Errorf("rule %d: header %s: Distinct takes no value", i, h.Name)
				case h.Type != "Distinct" && h.Type != "Exact" && h.Type != "RegularExpression":
					t.Errorf("rule %d: header %s: type %q", i, h.Name, h.Type)
				}
			}
		}
	}
}

// checkSelects checks that svc selects dep's pods, and that its named
// target ports are ports of dep's container.
func checkSelects(t *testing.T, svc service, o *k8sObject) {
	t.Helper()
	var dep deployment
	decodeNode(t, o, &dep)
	pod := dep.Spec.Template
	if !subset(svc.Spec.Selector, pod.Metadata.Labels) || !subset(dep.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Errorf("Service %s does not select Deployment %s's pods", svc.Metadata.Name, o.Metadata.Name)
	}
	named := map[string]int{}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			named[p.Name] = p.ContainerPort
		}
	}
	for _, sp := range svc.Spec.Ports {
		if resolvePort(sp.TargetPort, named) == 0 {
			t.Errorf("Service %s port %d: target port %v is no container port", svc.Metadata.Name, sp.Port, sp.TargetPort)
		}
	}
}

// TestEnvoyGatewayOverlay checks overlay.yaml: the ConfigMap is mounted
// into Envoy Gateway's rate-limit Deployment where RULES_OVERLAY points,
// the overlay parses, and applied to the RateLimitConfig Envoy Gateway
// builds from the example's Gateway, HTTPRoute and BackendTrafficPolicy
// it extends every entry: the per-user limit becomes a token bucket.
func TestEnvoyGatewayOverlay(t *testing.T) {
	objs := loadManifestsIn(t, envoyGatewayDir)
	find := func(kind, name string) *k8sObject {
		t.Helper()
		for _, o := range objs {
			if o.Kind == kind && o.Metadata.Name == name {
				return o
			}
		}
		t.Fatalf("no %s %s in %s", kind, name, envoyGatewayDir)
		return nil
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	decodeNode(t, find("ConfigMap", "envoy-gateway-config"), &cm)
	var eg envoyGatewayConfig
	decodeStrictYAML(t, "envoy-gateway.yaml", []byte(cm.Data["envoy-gateway.yaml"]), &eg)
	dep := eg.Provider.Kubernetes.RateLimitDeployment
	overlayCM := find("ConfigMap", "fastlimit-overlay")
	var path string
	for _, e := range dep.Container.Env {
		if e.Name == "RULES_OVERLAY" {
			path = e.Value
		}
	}
	var mounted bool
	for _, m := range dep.Container.VolumeMounts {
		for _, v := range dep.Pod.Volumes {
			if v.Name == m.Name && v.ConfigMap.Name == overlayCM.Metadata.Name && m.ReadOnly {
				mounted = mounted || strings.HasPrefix(path, m.MountPath+"/")
				path = strings.TrimPrefix(path, m.MountPath+"/")
			}
		}
	}
	if !mounted || overlayCM.Metadata.Namespace != "envoy-gateway-system" {
		t.Fatalf("RULES_OVERLAY %q is not a file of ConfigMap %s/%s mounted read-only into the rate-limit Deployment",
			path, overlayCM.Metadata.Namespace, overlayCM.Metadata.Name)
	}
	var data struct {
		Data map[string]string `yaml:"data"`
	}
	decodeNode(t, overlayCM, &data)
	ov, err := rules.ParseOverlay(path, []byte(data.Data[path]))
	if err != nil {
		t.Fatalf("%s in ConfigMap %s: %v", path, overlayCM.Metadata.Name, err)
	}

	// Envoy Gateway's RateLimitConfig for the example.
	var gw gateway
	decodeNode(t, find("Gateway", "eg"), &gw)
	var route httpRoute
	decodeNode(t, find("HTTPRoute", "echo"), &route)
	var btp backendTrafficPolicy
	decodeNode(t, find("BackendTrafficPolicy", "echo-global-limit"), &btp)
	routeKey := fmt.Sprintf("httproute/%s/%s/rule/0/match/0/%s", route.Metadata.Namespace, route.Metadata.Name,
		strings.ReplaceAll(route.Spec.Hostnames[0], ".", "_"))
	top := &rlsconf.RateLimitDescriptor{Key: routeKey, Value: routeKey}
	for i, r := range btp.Spec.RateLimit.Global.Rules {
		ruleKey := fmt.Sprintf("%s/%s/rule/%d", btp.Metadata.Namespace, btp.Metadata.Name, i)
		policy := &rlsconf.RateLimitPolicy{RequestsPerUnit: uint32(r.Limit.Requests),
			Unit: rlsconf.RateLimitUnit(rlsconf.RateLimitUnit_value[strings.ToUpper(r.Limit.Unit)])}
		match := &rlsconf.RateLimitDescriptor{Key: fmt.Sprintf("rule-%d-match--1", i), RateLimit: policy}
		match.Value = match.Key
		if len(r.ClientSelectors) > 0 { // the example's selectors: one Distinct header
			match = &rlsconf.RateLimitDescriptor{Key: fmt.Sprintf("rule-%d-match-0", i), RateLimit: policy}
		}
		top.Descriptors = append(top.Descriptors, &rlsconf.RateLimitDescriptor{Key: ruleKey, Value: ruleKey,
			Descriptors: []*rlsconf.RateLimitDescriptor{match}})
	}
	domain := gw.Metadata.Namespace + "/" + gw.Metadata.Name + "/" + gw.Spec.Listeners[0].Name
	loaded, err := rules.FromXDSWith([]*rlsconf.RateLimitConfig{{Name: domain, Domain: domain,
		Descriptors: []*rlsconf.RateLimitDescriptor{top}}}, ov)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.OverlayUnmatched != 0 {
		t.Errorf("overlay entries that extend nothing: %v", loaded.Warnings)
	}
	user := descriptors.Match(loaded.Set.Domain(domain), []descriptors.Entry{{Key: routeKey, Value: routeKey},
		{Key: btp.Metadata.Namespace + "/" + btp.Metadata.Name + "/rule/0", Value: btp.Metadata.Namespace + "/" + btp.Metadata.Name + "/rule/0"},
		{Key: "rule-0-match-0", Value: "alice"}})
	if user == nil || user.Algorithm != descriptors.TokenBucket || user.Burst != 10*descriptors.Milli || user.RequestsPerUnit != 3 {
		t.Errorf("the per-user limit %+v, want a token bucket of 3 a minute holding 10", user)
	}
}
