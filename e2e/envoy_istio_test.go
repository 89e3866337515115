package e2e_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

const (
	istioDir       = "../examples/istio"
	istioBootstrap = istioDir + "/envoy/bootstrap.yaml"
)

// k8sDocs returns the YAML documents of a manifest file, each as a map.
func k8sDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc != nil {
			out = append(out, doc)
		}
	}
}

// decodeProto decodes v (YAML decoded into Go values) into m as Envoy
// reads JSON, failing on unknown fields.
func decodeProto(t *testing.T, what string, v any, m proto.Message) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// dig walks v through map keys and list indexes.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// istioPatch is one configPatch of envoyfilter.yaml.
type istioPatch struct {
	applyTo, operation, subFilter string
	value                         any
}

func istioPatches(t *testing.T) map[string]istioPatch {
	t.Helper()
	out := map[string]istioPatch{}
	for _, doc := range k8sDocs(t, istioDir+"/envoyfilter.yaml") {
		if doc["kind"] != "EnvoyFilter" {
			continue
		}
		patches, _ := dig(doc, "spec", "configPatches").([]any)
		for _, p := range patches {
			ip := istioPatch{
				applyTo:   fmt.Sprint(dig(p, "applyTo")),
				operation: fmt.Sprint(dig(p, "patch", "operation")),
				value:     dig(p, "patch", "value"),
			}
			if sf := dig(p, "match", "listener", "filterChain", "filter", "subFilter", "name"); sf != nil {
				ip.subFilter = fmt.Sprint(sf)
			}
			out[ip.applyTo] = ip
		}
	}
	return out
}

// loadIstioBootstrap decodes examples/istio/envoy/bootstrap.yaml and
// returns it with its one listener's connection manager.
func loadIstioBootstrap(t *testing.T) (*bootstrapv3.Bootstrap, *hcmv3.HttpConnectionManager) {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal(files.Read(t, istioBootstrap), &doc); err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	decodeProto(t, istioBootstrap, doc, &bs)
	ls := bs.GetStaticResources().GetListeners()
	if len(ls) != 1 || len(ls[0].GetFilterChains()) != 1 || len(ls[0].GetFilterChains()[0].GetFilters()) != 1 {
		t.Fatalf("%s: want one listener with one connection manager", istioBootstrap)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	return &bs, &hcm
}

// istioService returns the fastlimit Service's DNS name and the port of
// its grpc-ratelimit port, from fastlimit.yaml.
func istioService(t *testing.T) (string, int) {
	t.Helper()
	for _, doc := range k8sDocs(t, istioDir+"/fastlimit.yaml") {
		if doc["kind"] != "Service" {
			continue
		}
		ports, _ := dig(doc, "spec", "ports").([]any)
		for _, p := range ports {
			if dig(p, "name") == "grpc-ratelimit" {
				port, _ := dig(p, "port").(int)
				return fmt.Sprintf("%s.%s.svc.cluster.local", dig(doc, "metadata", "name"), dig(doc, "metadata", "namespace")), port
			}
		}
	}
	t.Fatal("fastlimit.yaml: no Service with a grpc-ratelimit port")
	return "", 0
}

// TestIstioBootstrapMatchesEnvoyFilter checks examples/istio/envoy/bootstrap.yaml
// against envoyfilter.yaml and fastlimit.yaml, field by field: its
// rate-limit filter is the HTTP_FILTER patch's value, right before the
// router the patch names; every virtual host has the VIRTUAL_HOST patch's
// rate_limits; the cluster the filter calls is the one Istio builds for
// the fastlimit Service's grpc-ratelimit port, over HTTP/2.
func TestIstioBootstrapMatchesEnvoyFilter(t *testing.T) {
	patches := istioPatches(t)
	bs, hcm := loadIstioBootstrap(t)

	fp, ok := patches["HTTP_FILTER"]
	if !ok || fp.operation != "INSERT_BEFORE" || fp.subFilter != "envoy.filters.http.router" {
		t.Fatalf("envoyfilter.yaml: HTTP_FILTER patch %+v, want INSERT_BEFORE envoy.filters.http.router", fp)
	}
	var want hcmv3.HttpFilter
	decodeProto(t, "the HTTP_FILTER patch", fp.value, &want)
	filters := hcm.GetHttpFilters()
	i := len(filters) - 1
	if i < 1 || filters[i].GetName() != fp.subFilter {
		t.Fatalf("the bootstrap's filters end with %q, want the router", filters[i].GetName())
	}
	if got := filters[i-1]; !proto.Equal(got, &want) {
		t.Errorf("the filter before the router:\n%v\nwant the patch's:\n%v", got, &want)
	}

	vp, ok := patches["VIRTUAL_HOST"]
	if !ok || vp.operation != "MERGE" {
		t.Fatalf("envoyfilter.yaml: VIRTUAL_HOST patch %+v, want MERGE", vp)
	}
	var wantVH routev3.VirtualHost
	decodeProto(t, "the VIRTUAL_HOST patch", vp.value, &wantVH)
	vhosts := hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhosts) == 0 || len(wantVH.GetRateLimits()) == 0 {
		t.Fatalf("%d virtual hosts, the patch merges %d rate_limits", len(vhosts), len(wantVH.GetRateLimits()))
	}
	for _, vh := range vhosts {
		got := &routev3.VirtualHost{RateLimits: vh.GetRateLimits()}
		if !proto.Equal(got, &routev3.VirtualHost{RateLimits: wantVH.GetRateLimits()}) {
			t.Errorf("virtual host %s: rate_limits\n%v\nwant the patch's\n%v", vh.GetName(), vh.GetRateLimits(), wantVH.GetRateLimits())
		}
	}

	var rl ratelimitv3.RateLimit
	if err := want.GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	eg := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc()
	host, port := istioService(t)
	if name := fmt.Sprintf("outbound|%d||%s", port, host); eg.GetClusterName() != name || eg.GetAuthority() != host {
		t.Errorf("the filter calls cluster %q (authority %q), want Istio's %q (%q)", eg.GetClusterName(), eg.GetAuthority(), name, host)
	}
	var cluster *clusterv3.Cluster
	for _, c := range bs.GetStaticResources().GetClusters() {
		if c.GetName() == eg.GetClusterName() {
			cluster = c
		}
	}
	if cluster == nil {
		t.Fatalf("the bootstrap has no cluster %q", eg.GetClusterName())
	}
	sa := cluster.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() != host || int(sa.GetPortValue()) != port {
		t.Errorf("cluster %s reaches %s:%d, want the Service, %s:%d", cluster.GetName(), sa.GetAddress(), sa.GetPortValue(), host, port)
	}
	var opts upstreamhttpv3.HttpProtocolOptions
	if err := cluster.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&opts); err != nil ||
		opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s does not speak HTTP/2 (%v), as Istio's does for a grpc- port", cluster.GetName(), err)
	}
}

// startIstioFastLimit starts FastLimit as fastlimit.yaml's Deployment
// runs it (its args and environment, the Secret's REDIS_URL pointing at
// a Redis of the test's own, the admin listener moved), with the rules
// of rules-configmap.yaml as the mounted directory holds them.
func startIstioFastLimit(t *testing.T) *fastlimit {
	t.Helper()
	var args []string
	env := map[string]string{}
	var rulesDir string
	for _, doc := range k8sDocs(t, istioDir+"/rules-configmap.yaml") {
		data, _ := doc["data"].(map[string]any)
		rules := map[string]string{}
		for name, body := range data {
			rules[name] = fmt.Sprint(body)
		}
		rulesDir = files.Dir(t, rules)
	}
	for _, doc := range k8sDocs(t, istioDir+"/fastlimit.yaml") {
		if doc["kind"] != "Deployment" {
			continue
		}
		c := dig(doc, "spec", "template", "spec", "containers", 0)
		for _, a := range dig(c, "args").([]any) {
			args = append(args, fmt.Sprint(a))
		}
		for _, e := range dig(c, "env").([]any) {
			if v := dig(e, "value"); v != nil {
				env[fmt.Sprint(dig(e, "name"))] = fmt.Sprint(v)
			}
		}
	}
	if len(args) != 2 || args[0] != "--config" || rulesDir == "" || env["ADMIN_ADDR"] == "" {
		t.Fatalf("fastlimit.yaml: args %v, env %v: the test substitutes what it no longer finds", args, env)
	}
	env["REDIS_URL"] = "redis://" + redistest.StartServer(t).Addr + "/0"
	delete(env, "ADMIN_ADDR")
	admin := loopback.Addr(t)
	fl := start(t, launch{rules: rulesDir, env: env, flags: []string{"--admin-addr", admin}})
	fl.Admin = admin
	return fl
}

// TestEnvoyIstioBootstrap runs examples/istio/envoy/bootstrap.yaml (its
// addresses substituted, nothing else) in front of FastLimit as the Istio
// example deploys it: the limit the ConfigMap documents for writes, 120
// per client address in 5 minutes (each of cost 5 of 600), lets the 120th
// POST through and refuses the 121st.
func TestEnvoyIstioBootstrap(t *testing.T) {
	fl := startIstioFastLimit(t)
	host, port := istioService(t)
	up := envoytest.StartUpstream(t, nil)
	f := startFrontOn(t, "istio", files.Read(t, istioBootstrap), "0.0.0.0:8080", map[string]string{
		net.JoinHostPort(host, strconv.Itoa(port)): fl.GRPC,
		"httpbin.default.svc.cluster.local:8000":   up.Addr,
	})
	f.cluster = "outbound|8000||httpbin.default.svc.cluster.local"
	const writes = 120
	attempt(t, f, 5*time.Minute, func(c *envoytest.Client) error {
		for i := 1; i <= writes+1; i++ {
			r, err := f.checked(t, c, http.MethodPost, "/anything")
			if err != nil {
				return err
			}
			if i <= writes && r.Code != http.StatusOK || i > writes && r.Code != http.StatusTooManyRequests {
				return fmt.Errorf("write %d: %d", i, r.Code)
			}
		}
		return nil
	})
	if over := series(t, fl, `fastlimit_rule_over_limit_total{domain="ingress",rule="writes_per_ip"}`); over < 1 {
		t.Errorf("FastLimit counted %v hits over writes_per_ip", over)
	}
}
