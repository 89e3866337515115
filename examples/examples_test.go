package examples_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rls"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// Paths, relative to this package's directory (where go test runs).
const (
	envoyYAML  = "envoy/envoy.yaml"
	envoyRules = "envoy/rules"
	// fastlimitOnly holds the rules that use FastLimit's extensions, which
	// envoyproxy/ratelimit refuses.
	fastlimitOnly = "fastlimit-only"
	istioDir      = "istio"
	composeFile   = "../docker-compose.yml"
	dockerfile    = "../Dockerfile"
	dockerignore  = "../.dockerignore"
)

const (
	rateLimitFilter = "envoy.filters.http.ratelimit"
	routerFilter    = "envoy.filters.http.router"
	hcmFilter       = "envoy.filters.network.http_connection_manager"
)

// sampleHeaders are the header values the descriptor builder tries for
// request_headers actions: every plan tier, and one no rule names.
var sampleHeaders = map[string][]string{
	"x-plan":    {"free", "pro", "enterprise", "gold"},
	"x-api-key": {"key-123"},
}

// sampleRemoteAddress is what remote_address actions send.
const sampleRemoteAddress = "203.0.113.7"

// TestEnvoyBootstrap decodes envoy.yaml strictly into Envoy's Bootstrap,
// validates it and every typed config inside it, and checks the parts
// FastLimit depends on.
func TestEnvoyBootstrap(t *testing.T) {
	bs := loadBootstrap(t)

	if got := bs.GetAdmin().GetAddress().GetSocketAddress().GetPortValue(); got != 9901 {
		t.Errorf("admin port = %d, want 9901", got)
	}
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}

	hcm, lis := findHCM(t, bs)
	if got := lis.GetAddress().GetSocketAddress().GetPortValue(); got != 10000 {
		t.Errorf("listener %q port = %d, want 10000", lis.GetName(), got)
	}
	rl := rateLimitConfig(t, hcm.GetHttpFilters())

	rules := loadDir(t, envoyRules)
	if rules.Set.Domain(rl.GetDomain()) == nil {
		t.Errorf("ratelimit filter domain %q is not in %s (domains %v)", rl.GetDomain(), envoyRules, rules.Set.Domains())
	}
	raw := rateLimitFilterRaw(t, readYAML(t, envoyYAML))
	if v, ok := raw["failure_mode_deny"]; !ok || v != false {
		t.Errorf("failure_mode_deny = %v (set: %v), want an explicit false", v, ok)
	}
	checkRateLimitFilter(t, rl)

	svc := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	if svc != "fastlimit" {
		t.Errorf("rate_limit_service cluster = %q, want fastlimit", svc)
	}
	fl, ok := clusters[svc]
	if !ok {
		t.Fatalf("rate_limit_service names cluster %q, which envoy.yaml does not define", svc)
	}
	if fl.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("cluster fastlimit type = %v, want STRICT_DNS", fl.GetType())
	}
	if host, port := clusterEndpoint(fl); host != "fastlimit" || port != 8081 {
		t.Errorf("cluster fastlimit endpoint = %s:%d, want fastlimit:8081", host, port)
	}
	checkHTTP2(t, fl)

	// Every route's cluster exists.
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if c := r.GetRoute().GetCluster(); c != "" && clusters[c] == nil {
				t.Errorf("route %v targets undefined cluster %q", r.GetMatch(), c)
			}
		}
	}
}

// checkRateLimitFilter checks the filter settings both envoy.yaml and the
// Istio EnvoyFilter use.
func checkRateLimitFilter(t *testing.T, rl *ratelimitv3.RateLimit) {
	t.Helper()
	if rl.GetDomain() == "" {
		t.Error("ratelimit filter has no domain")
	}
	if d := rl.GetTimeout().AsDuration(); d <= 0 || d > time.Second {
		t.Errorf("ratelimit filter timeout = %v, want a set timeout in (0, 1s]: Envoy waits that long on every request", d)
	}
	if rl.GetFailureModeDeny() {
		t.Error("failure_mode_deny = true, want false (fail open)")
	}
	if !rl.GetRateLimitedAsResourceExhausted() {
		t.Error("rate_limited_as_resource_exhausted = false, want true")
	}
	if got := rl.GetRateLimitService().GetTransportApiVersion(); got != corev3.ApiVersion_V3 {
		t.Errorf("rate_limit_service.transport_api_version = %v, want V3", got)
	}
}

func checkHTTP2(t *testing.T, c *clusterv3.Cluster) {
	t.Helper()
	const key = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	a, ok := c.GetTypedExtensionProtocolOptions()[key]
	if !ok {
		t.Errorf("cluster %s has no typed_extension_protocol_options[%s]", c.GetName(), key)
		return
	}
	var opts upstreamhttpv3.HttpProtocolOptions
	if err := a.UnmarshalTo(&opts); err != nil {
		t.Fatalf("cluster %s protocol options: %v", c.GetName(), err)
	}
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s does not speak HTTP/2 (explicit_http_config.http2_protocol_options): gRPC needs it", c.GetName())
	}
}

// TestRulesLoad loads every rules file through the project's loader: each
// directory whole, each file alone, and the rules in the Istio ConfigMap.
func TestRulesLoad(t *testing.T) {
	for _, dir := range []string{"../config", "../config/examples", envoyRules, fastlimitOnly} {
		found := rulesFiles(t, dir)
		if len(found) == 0 {
			if dir == envoyRules {
				t.Fatalf("%s holds no rules files", dir)
			}
			t.Logf("%s: no rules files", dir)
			continue
		}
		t.Run(dir, func(t *testing.T) {
			if _, err := rules.Load(dir); err != nil {
				t.Errorf("rules.Load(%s): %v", dir, err)
			}
			for name, b := range found {
				if _, err := rules.Parse(map[string][]byte{name: b}); err != nil {
					t.Errorf("rules.Parse(%s): %v", filepath.Join(dir, name), err)
				}
			}
		})
	}
	t.Run("istio ConfigMap", func(t *testing.T) {
		if _, err := rules.Parse(istioRuleFiles(t)); err != nil {
			t.Errorf("rules.Parse(ConfigMap fastlimit-rules): %v", err)
		}
	})
}

// TestEnvoyRulesUseExtensions keeps the example showing what FastLimit adds
// to envoyproxy/ratelimit's format.
func TestEnvoyRulesUseExtensions(t *testing.T) {
	rules := loadDir(t, envoyRules)
	algorithms := map[descriptors.Algorithm]bool{}
	var multiplier, burst, cost, tenant bool
	for _, l := range rules.Set.Limits() {
		if l.Unlimited {
			continue
		}
		algorithms[l.Algorithm] = true
		multiplier = multiplier || l.UnitMultiplier > 1
		burst = burst || (l.Algorithm == descriptors.TokenBucket && l.Burst != l.Capacity())
		cost = cost || l.Cost != descriptors.Milli
	}
	for _, name := range rules.Set.Domains() {
		tenant = tenant || rules.Set.Domain(name).TenantKey != ""
	}
	for _, a := range []descriptors.Algorithm{descriptors.FixedWindow, descriptors.SlidingWindow, descriptors.TokenBucket} {
		if !algorithms[a] {
			t.Errorf("no rule in %s uses algorithm %s", envoyRules, a)
		}
	}
	for what, ok := range map[string]bool{"unit_multiplier": multiplier, "burst": burst, "cost": cost, "tenant_key": tenant} {
		if !ok {
			t.Errorf("no rule in %s uses %s", envoyRules, what)
		}
	}
}

// TestEnvoyActionsMatchRules builds every descriptor the rate_limits of
// envoy.yaml can send and checks that a rule matches each, and that every
// rule of the domain is reached.
func TestEnvoyActionsMatchRules(t *testing.T) {
	bs := loadBootstrap(t)
	hcm, _ := findHCM(t, bs)
	rl := rateLimitConfig(t, hcm.GetHttpFilters())
	rules := loadDir(t, envoyRules)
	checkActionsMatch(t, rules.Set, rl.GetDomain(), envoyRateLimits(t, hcm))
}

// TestEnvoyHeaderWindows: the compose example's rate-limit headers state
// each rule's real window. Envoy's draft-03 headers
// (enable_x_ratelimit_headers) take the window from the unit alone, so
// they may be on only if every rule the actions reach is a window of one
// whole unit; otherwise FastLimit's --response-headers ietf gives them,
// its RateLimit-Policy stating unit_multiplier units, or for a token
// bucket the time it takes to fill from empty.
func TestEnvoyHeaderWindows(t *testing.T) {
	bs := loadBootstrap(t)
	hcm, _ := findHCM(t, bs)
	rl := rateLimitConfig(t, hcm.GetHttpFilters())
	set := loadDir(t, envoyRules).Set
	fl := loadCompose(t)["fastlimit"]
	mode := flagValue(fl.command(), "response-headers")
	if mode == "" {
		mode = fl.env()["RESPONSE_HEADERS"]
	}
	draft03 := rl.GetEnableXRatelimitHeaders() == ratelimitv3.RateLimit_DRAFT_VERSION_03
	switch {
	case draft03 && mode != "" && mode != rls.HeadersOff:
		t.Errorf("Envoy's draft-03 headers and FastLimit's --response-headers %s: each response would carry two sets", mode)
	case !draft03 && mode != rls.HeadersIETF:
		t.Errorf("enable_x_ratelimit_headers %v and --response-headers %q: want FastLimit's ietf headers", rl.GetEnableXRatelimitHeaders(), mode)
	}

	mem := store.NewMemory(store.MemoryOptions{})
	if err := mem.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	l := limiter.New(mem, limiter.Options{})
	l.SetRules(set)
	svc := rls.New(l, rls.Options{Headers: rls.HeaderOptions{ResponseHeaders: mode}}, zap.NewNop())
	policy := regexp.MustCompile(`^"[^"]*";q=(\d+);w=(\d+)$`)
	checked := map[string]*descriptors.Limit{}
	for _, entries := range envoyDescriptors(t, hcm) {
		lim := descriptors.Match(set.Domain(rl.GetDomain()), entries)
		if lim == nil || lim.Unlimited || checked[lim.Path] != nil {
			continue
		}
		checked[lim.Path] = lim
		quota, window := ruleWindow(lim)
		if draft03 {
			if lim.Algorithm == descriptors.TokenBucket || window != lim.Unit.Seconds() {
				t.Errorf("rule %s: %d per %ds, which Envoy's draft-03 headers would call %d per %ds",
					lim.Path, quota, window, lim.RequestsPerUnit, lim.Unit.Seconds())
			}
			continue
		}
		var es []*common.RateLimitDescriptor_Entry
		for _, e := range entries {
			es = append(es, &common.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{
			Domain: rl.GetDomain(), Descriptors: []*common.RateLimitDescriptor{{Entries: es}}})
		if err != nil {
			t.Fatalf("rule %s: %v", lim.Path, err)
		}
		var got []string
		for _, h := range resp.GetResponseHeadersToAdd() {
			if h.GetKey() == "RateLimit-Policy" {
				got = policy.FindStringSubmatch(h.GetValue())
			}
		}
		if want := []string{fmt.Sprint(quota), fmt.Sprint(window)}; len(got) != 3 || !slices.Equal(got[1:], want) {
			t.Errorf("rule %s: RateLimit-Policy %q, want q=%s;w=%s", lim.Path, got, want[0], want[1])
		}
	}
	// login_per_ip, 10 per 15 minutes: w=900, where draft-03 said w=60.
	if login := checked["edge.route_login.remote_address"]; login == nil {
		t.Error("no rate_limits action reaches login_per_ip (edge.route_login.remote_address)")
	} else if q, w := ruleWindow(login); q != 10 || w != 900 {
		t.Errorf("login_per_ip: %d per %ds, want 10 per 900s", q, w)
	}
}

// ruleWindow is a rule's quota and window in seconds, as a client should
// read them: requests_per_unit in unit_multiplier units; for a token
// bucket, its burst and the time to fill it from empty.
func ruleWindow(l *descriptors.Limit) (quota, seconds int64) {
	seconds = l.Unit.Seconds() * int64(max(l.UnitMultiplier, 1))
	if l.Algorithm != descriptors.TokenBucket {
		return int64(l.RequestsPerUnit), seconds
	}
	quota = l.Burst / descriptors.Milli
	return quota, (quota*seconds + int64(l.RequestsPerUnit) - 1) / int64(l.RequestsPerUnit)
}

// TestIstioActionsMatchRules does the same for the Istio EnvoyFilters and
// the rules in the ConfigMap.
func TestIstioActionsMatchRules(t *testing.T) {
	objs := loadManifests(t)
	filter, vhost := istioPatches(t, objs)

	var hf hcmv3.HttpFilter
	decodeStrict(t, "EnvoyFilter HTTP_FILTER patch", filter.Patch.Value, &hf)
	validateTree(t, "EnvoyFilter HTTP_FILTER patch", &hf)
	if hf.GetName() != rateLimitFilter {
		t.Errorf("inserted filter = %q, want %s", hf.GetName(), rateLimitFilter)
	}
	rl := rateLimitConfig(t, []*hcmv3.HttpFilter{&hf, {Name: routerFilter}})
	checkRateLimitFilter(t, rl)
	// The rules have token buckets and a unit_multiplier: draft-03 would
	// state the wrong windows (TestEnvoyHeaderWindows), so FastLimit's IETF
	// headers answer instead (TestIstioManifests checks RESPONSE_HEADERS).
	if got := rl.GetEnableXRatelimitHeaders(); got == ratelimitv3.RateLimit_DRAFT_VERSION_03 {
		t.Errorf("enable_x_ratelimit_headers = %v: its windows would be wrong for these rules", got)
	}
	if raw, _ := filter.Patch.Value["typed_config"].(map[string]any); raw == nil || raw["failure_mode_deny"] != false {
		t.Error("EnvoyFilter: failure_mode_deny should be set explicitly to false")
	}

	var vh routev3.VirtualHost
	decodeStrict(t, "EnvoyFilter VIRTUAL_HOST patch", vhost.Patch.Value, &vh)
	if len(vh.GetRateLimits()) == 0 {
		t.Fatal("EnvoyFilter VIRTUAL_HOST patch adds no rate_limits")
	}
	for i, r := range vh.GetRateLimits() {
		if err := r.ValidateAll(); err != nil {
			t.Errorf("EnvoyFilter rate_limits[%d]: %v", i, err)
		}
	}

	rules, err := rules.Parse(istioRuleFiles(t))
	if err != nil {
		t.Fatalf("rules.Parse(ConfigMap fastlimit-rules): %v", err)
	}
	if rules.Set.Domain(rl.GetDomain()) == nil {
		t.Fatalf("EnvoyFilter domain %q is not in ConfigMap fastlimit-rules (domains %v)", rl.GetDomain(), rules.Set.Domains())
	}
	checkActionsMatch(t, rules.Set, rl.GetDomain(), vh.GetRateLimits())
}

func checkActionsMatch(t *testing.T, set *descriptors.Set, domain string, rateLimits []*routev3.RateLimit) {
	t.Helper()
	d := set.Domain(domain)
	if d == nil {
		t.Fatalf("domain %q not loaded", domain)
	}
	reached := map[*descriptors.Limit]bool{}
	for i, r := range rateLimits {
		descs, err := buildDescriptors(r)
		if err != nil {
			t.Errorf("rate_limits[%d]: %v", i, err)
			continue
		}
		for _, entries := range descs {
			l := descriptors.Match(d, entries)
			if l == nil {
				t.Errorf("rate_limits[%d]: no rule of domain %q matches descriptor %s", i, domain, formatEntries(entries))
				continue
			}
			reached[l] = true
		}
	}
	for _, l := range set.Limits() {
		if strings.HasPrefix(l.Path, domain+".") && !reached[l] {
			t.Errorf("rule %s is reached by no rate_limits action", l.Path)
		}
	}
}

// choice is the values one action can put in a descriptor entry; absent
// means the action can also add no entry (skip_if_absent).
type choice struct {
	key    string
	values []string
	absent bool
}

// buildDescriptors returns every descriptor a rate_limits entry sends, as
// Envoy builds them: one entry per action, in order. Actions that produce
// nothing for a request drop the whole descriptor, so only the requests for
// which every action produces an entry are listed.
func buildDescriptors(r *routev3.RateLimit) ([][]descriptors.Entry, error) {
	var choices []choice
	for i, a := range r.GetActions() {
		c, err := actionChoice(a)
		if err != nil {
			return nil, fmt.Errorf("action %d: %w", i, err)
		}
		choices = append(choices, c)
	}
	out := [][]descriptors.Entry{nil}
	for _, c := range choices {
		var next [][]descriptors.Entry
		for _, prefix := range out {
			if c.absent {
				next = append(next, prefix)
			}
			for _, v := range c.values {
				e := append(slices.Clip(prefix), descriptors.Entry{Key: c.key, Value: v})
				next = append(next, e)
			}
		}
		out = next
	}
	// Envoy sends no empty descriptor.
	return slices.DeleteFunc(out, func(e []descriptors.Entry) bool { return len(e) == 0 }), nil
}

func actionChoice(a *routev3.RateLimit_Action) (choice, error) {
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	switch {
	case a.GetRemoteAddress() != nil:
		return choice{key: "remote_address", values: []string{sampleRemoteAddress}}, nil
	case a.GetRequestHeaders() != nil:
		h := a.GetRequestHeaders()
		vals, ok := sampleHeaders[strings.ToLower(h.GetHeaderName())]
		if !ok {
			vals = []string{"sample"}
		}
		return choice{key: h.GetDescriptorKey(), values: vals, absent: h.GetSkipIfAbsent()}, nil
	case a.GetGenericKey() != nil:
		g := a.GetGenericKey()
		return choice{key: or(g.GetDescriptorKey(), "generic_key"), values: []string{g.GetDescriptorValue()}}, nil
	case a.GetHeaderValueMatch() != nil:
		h := a.GetHeaderValueMatch()
		for _, m := range h.GetHeaders() {
			// Envoy's regexes are RE2, as Go's are.
			if re := m.GetStringMatch().GetSafeRegex().GetRegex(); re != "" {
				if _, err := regexp.Compile(re); err != nil {
					return choice{}, fmt.Errorf("header %s: %w", m.GetName(), err)
				}
			}
		}
		vals := []string{h.GetDescriptorValue()}
		if h.GetDefaultValue() != "" {
			vals = append(vals, h.GetDefaultValue())
		}
		return choice{key: or(h.GetDescriptorKey(), "header_match"), values: vals}, nil
	}
	return choice{}, fmt.Errorf("action %v: the test's descriptor builder does not know it; teach actionChoice", a)
}

func formatEntries(es []descriptors.Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Key + "=" + e.Value
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// TestKubernetesManifests checks the Kubernetes and Istio manifests hang
// together: names, ports, probes, the rules volume and the Redis secret.
func TestKubernetesManifests(t *testing.T) {
	objs := loadManifests(t)
	byKind := func(kind, name string) *k8sObject {
		t.Helper()
		for _, o := range objs {
			if o.Kind == kind && o.Metadata.Name == name {
				return o
			}
		}
		t.Fatalf("no %s %q in %s", kind, name, istioDir)
		return nil
	}
	for _, o := range objs {
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			t.Errorf("%s: a document lacks apiVersion, kind or metadata.name", o.file)
		}
		if o.Kind != "Namespace" && o.Metadata.Namespace == "" {
			t.Errorf("%s: %s %s has no namespace", o.file, o.Kind, o.Metadata.Name)
		}
	}

	ns := byKind("Namespace", "fastlimit")
	if ns.Metadata.Labels["istio-injection"] != "enabled" {
		t.Errorf("namespace fastlimit is not in the mesh (istio-injection=%q)", ns.Metadata.Labels["istio-injection"])
	}
	cm := byKind("ConfigMap", "fastlimit-rules")
	secret := byKind("Secret", "fastlimit-redis")

	var dep deployment
	decodeNode(t, byKind("Deployment", "fastlimit"), &dep)
	pod := dep.Spec.Template
	if !subset(dep.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Errorf("Deployment fastlimit: selector %v does not select its pods %v", dep.Spec.Selector.MatchLabels, pod.Metadata.Labels)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("Deployment fastlimit: %d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// The rules: the ConfigMap, mounted as a directory, is --config.
	var rulesVolume string
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name {
			rulesVolume = v.Name
		}
	}
	if rulesVolume == "" {
		t.Fatalf("Deployment fastlimit mounts no volume from ConfigMap %s", cm.Metadata.Name)
	}
	var mountPath string
	for _, m := range c.VolumeMounts {
		if m.Name != rulesVolume {
			continue
		}
		mountPath = m.MountPath
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("rules volume mounted with subPath %q: subPath mounts never update, so hot reload would not work", m.SubPath+m.SubPathExpr)
		}
	}
	if mountPath == "" {
		t.Fatalf("container %s does not mount volume %s", c.Name, rulesVolume)
	}
	if got := flagValue(c.Args, "config"); got != mountPath {
		t.Errorf("container %s: --config = %q, want the rules mount %q", c.Name, got, mountPath)
	}

	// Probes.
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, p := range []struct {
		name  string
		probe *probe
		path  string
	}{{"livenessProbe", c.LivenessProbe, "/healthcheck"}, {"readinessProbe", c.ReadinessProbe, "/ready"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("container %s: no %s.httpGet", c.Name, p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("container %s: %s path = %q, want %q", c.Name, p.name, p.probe.HTTPGet.Path, p.path)
		}
		if port := resolvePort(p.probe.HTTPGet.Port, ports); port != 8080 {
			t.Errorf("container %s: %s port = %v (%d), want the HTTP port 8080", c.Name, p.name, p.probe.HTTPGet.Port, port)
		}
	}

	// Headers that state each rule's window: FastLimit's IETF ones.
	headers := ""
	for _, e := range c.Env {
		if e.Name == "RESPONSE_HEADERS" {
			headers = e.Value
		}
	}
	if headers != rls.HeadersIETF {
		t.Errorf("container %s: RESPONSE_HEADERS=%q, want %s (the EnvoyFilter sends no draft-03 headers)", c.Name, headers, rls.HeadersIETF)
	}

	// Liveness must not follow Redis: an outage would restart every pod.
	for _, e := range c.Env {
		if e.Name == "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION" && e.Value != "false" {
			t.Errorf("container %s: REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=%q makes the liveness probe fail with Redis", c.Name, e.Value)
		}
	}

	// REDIS_URL comes from the Secret, which points at the Redis Service.
	var ref *secretKeyRef
	for _, e := range c.Env {
		if e.Name == "REDIS_URL" {
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Fatalf("container %s: REDIS_URL should come from secretKeyRef", c.Name)
			}
			ref = e.ValueFrom.SecretKeyRef
		}
	}
	if ref == nil {
		t.Fatalf("container %s sets no REDIS_URL", c.Name)
	}
	if ref.Name != secret.Metadata.Name || ref.Key != "url" {
		t.Errorf("REDIS_URL from secret %s key %s, want %s key url", ref.Name, ref.Key, secret.Metadata.Name)
	}
	var sec struct {
		Data       map[string]string `yaml:"data"`
		StringData map[string]string `yaml:"stringData"`
	}
	decodeNode(t, secret, &sec)
	redisURL, ok := sec.StringData["url"]
	if !ok {
		_, ok = sec.Data["url"]
	}
	if !ok {
		t.Errorf("Secret %s has no key url", secret.Metadata.Name)
	}

	// Services.
	var svc service
	decodeNode(t, byKind("Service", "fastlimit"), &svc)
	if !subset(svc.Spec.Selector, pod.Metadata.Labels) {
		t.Errorf("Service fastlimit selects %v, not the Deployment's pods %v", svc.Spec.Selector, pod.Metadata.Labels)
	}
	svcPorts := map[int]servicePort{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Port] = p
	}
	// The grpc- prefix makes Istio speak HTTP/2 to the port.
	if p := svcPorts[8081]; !strings.HasPrefix(p.Name, "grpc-") || resolvePort(p.TargetPort, ports) != 8081 {
		t.Errorf("Service fastlimit: want port 8081 named grpc-* -> container 8081, got %+v", svc.Spec.Ports)
	}
	if p := svcPorts[8080]; p.Name != "http" || resolvePort(p.TargetPort, ports) != 8080 {
		t.Errorf("Service fastlimit: want port 8080 named http -> container 8080, got %+v", svc.Spec.Ports)
	}

	var redisDep deployment
	decodeNode(t, byKind("Deployment", "redis"), &redisDep)
	var redisSvc service
	rs := byKind("Service", "redis")
	decodeNode(t, rs, &redisSvc)
	if !subset(redisSvc.Spec.Selector, redisDep.Spec.Template.Metadata.Labels) {
		t.Errorf("Service redis selects %v, not the redis pods %v", redisSvc.Spec.Selector, redisDep.Spec.Template.Metadata.Labels)
	}
	if redisURL != "" {
		u, err := url.Parse(redisURL)
		if err != nil {
			t.Fatalf("Secret %s url: %v", secret.Metadata.Name, err)
		}
		want := rs.Metadata.Name + "." + rs.Metadata.Namespace + ".svc.cluster.local"
		if h := u.Hostname(); h != want && h != rs.Metadata.Name && h != rs.Metadata.Name+"."+rs.Metadata.Namespace {
			t.Errorf("Secret %s url host %q is not the redis Service (%s)", secret.Metadata.Name, h, want)
		}
	}

	// The EnvoyFilters.
	filter, vhost := istioPatches(t, objs)
	if filter.Patch.Operation != "INSERT_BEFORE" || filter.Match.Context != "GATEWAY" ||
		filter.Match.Listener.FilterChain.Filter.Name != hcmFilter ||
		filter.Match.Listener.FilterChain.Filter.SubFilter.Name != routerFilter {
		t.Errorf("HTTP_FILTER patch should INSERT_BEFORE %s in %s in context GATEWAY, got %+v", routerFilter, hcmFilter, filter)
	}
	if vhost.Patch.Operation != "MERGE" || vhost.Match.Context != "GATEWAY" {
		t.Errorf("VIRTUAL_HOST patch should MERGE in context GATEWAY, got %+v", vhost)
	}
	var hf hcmv3.HttpFilter
	decodeStrict(t, "EnvoyFilter HTTP_FILTER patch", filter.Patch.Value, &hf)
	rl := rateLimitConfig(t, []*hcmv3.HttpFilter{&hf, {Name: routerFilter}})
	wantCluster := fmt.Sprintf("outbound|8081||%s.%s.svc.cluster.local", svc.Metadata.Name, svc.Metadata.Namespace)
	if got := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != wantCluster {
		t.Errorf("EnvoyFilter rate_limit_service cluster = %q, want %q", got, wantCluster)
	}
}

// TestDockerCompose checks docker-compose.yml against the files it names
// and against envoy.yaml's clusters.
func TestDockerCompose(t *testing.T) {
	services := loadCompose(t)
	svc := func(name string) composeService {
		t.Helper()
		s, ok := services[name]
		if !ok {
			t.Fatalf("%s: no service %q", composeFile, name)
		}
		return s
	}
	envoy, fl, redis := svc("envoy"), svc("fastlimit"), svc("redis")

	if !strings.HasPrefix(envoy.Image, "envoyproxy/envoy:v1.") {
		t.Errorf("envoy image = %q, want the official envoyproxy/envoy", envoy.Image)
	}
	if !mountsFile(t, envoy, filepath.Join("examples", envoyYAML), false) {
		t.Errorf("envoy does not mount examples/%s", envoyYAML)
	}
	if !publishes(envoy, 10000) {
		t.Errorf("envoy does not publish port 10000")
	}

	if !strings.HasPrefix(redis.Image, "redis:7") {
		t.Errorf("redis image = %q, want redis:7-alpine", redis.Image)
	}

	ctx, df := fl.build()
	if ctx == "" {
		t.Fatal("fastlimit is not built from the repository")
	}
	if _, err := os.Stat(filepath.Join("..", ctx, df)); err != nil {
		t.Errorf("fastlimit build: %v", err)
	}
	env := fl.env()
	if u := env["REDIS_URL"]; u != "redis://redis:6379/0" {
		t.Errorf("fastlimit REDIS_URL = %q, want redis://redis:6379/0", u)
	}
	if u, err := url.Parse(env["REDIS_URL"]); err == nil {
		if _, ok := services[u.Hostname()]; !ok {
			t.Errorf("REDIS_URL host %q is no compose service", u.Hostname())
		}
	}
	configDir := flagValue(fl.command(), "config")
	if configDir == "" {
		configDir = env["CONFIG"]
	}
	var rulesMounted bool
	for _, v := range fl.volumes() {
		if v.target != configDir {
			continue
		}
		st, err := os.Stat(filepath.Join("..", v.source))
		if err != nil {
			t.Fatalf("fastlimit volume %s: %v", v.source, err)
		}
		if !st.IsDir() {
			t.Errorf("fastlimit mounts %s as a file: mount the rules directory, or edits never reach the watcher", v.source)
		}
		if filepath.Clean(v.source) != filepath.Join("examples", envoyRules) {
			t.Errorf("fastlimit mounts %s at %s, want examples/%s", v.source, v.target, envoyRules)
		}
		rulesMounted = true
	}
	if !rulesMounted {
		t.Errorf("fastlimit: --config %q is not a mounted rules directory", configDir)
	}
	for _, p := range []int{8080, 8081} {
		if !publishes(fl, p) {
			t.Errorf("fastlimit does not publish port %d", p)
		}
	}

	// envoy.yaml's STRICT_DNS clusters name compose services.
	bs := loadBootstrap(t)
	for _, c := range bs.GetStaticResources().GetClusters() {
		host, port := clusterEndpoint(c)
		if _, ok := services[host]; !ok {
			t.Errorf("envoy.yaml cluster %s points at %s:%d, which is no compose service", c.GetName(), host, port)
		}
	}
}

// TestDockerfile reads the Dockerfile as text: a multi-stage, static build
// of ./cmd/server into a non-root final image.
func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, files.Read(t, dockerfile))
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a multi-stage build", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.from, "golang:1.26") {
		t.Errorf("build stage FROM %s, want golang:1.26", build.from)
	}
	var built bool
	for _, run := range build.all("RUN") {
		if strings.Contains(run, "go build") {
			built = true
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/server", "-o /fastlimit"} {
				if !strings.Contains(run, want) {
					t.Errorf("go build step lacks %q: %s", want, run)
				}
			}
		}
	}
	if !built {
		t.Error("no stage runs go build")
	}
	if _, err := os.Stat("../cmd/server"); err != nil {
		t.Errorf("the Dockerfile builds ./cmd/server: %v", err)
	}

	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") && final.from != "scratch" {
		t.Errorf("final stage FROM %s, want distroless static or scratch", final.from)
	}
	// A numeric user: Kubernetes' runAsNonRoot can only check a number.
	user := final.last("USER")
	if u, _, _ := strings.Cut(user, ":"); u == "" || strings.Trim(u, "0123456789") != "" || strings.Trim(u, "0") == "" {
		t.Errorf("final stage runs as %q, want a numeric non-root user", user)
	}
	for _, p := range []string{"8080", "8081"} {
		if !slices.Contains(strings.Fields(final.last("EXPOSE")), p) {
			t.Errorf("final stage does not EXPOSE %s", p)
		}
	}
	// The binary is where Envoy Gateway starts envoyproxy/ratelimit's, and
	// runs without flags: no CMD.
	if ep := final.last("ENTRYPOINT"); ep != `["/bin/ratelimit"]` {
		t.Errorf("ENTRYPOINT = %s, want [\"/bin/ratelimit\"]", ep)
	}
	if cmd := final.last("CMD"); cmd != "" {
		t.Errorf("CMD = %s, want none: the image runs on the environment alone", cmd)
	}
	var linked bool
	for _, run := range build.all("RUN") {
		linked = linked || strings.Contains(run, "/out/bin/ratelimit") && strings.Contains(run, "ln -s bin/ratelimit /out/fastlimit")
	}
	if !linked || !slices.Contains(final.all("COPY"), "--from=build /out/ /") {
		t.Error("the final stage lacks /bin/ratelimit and /fastlimit from the build stage's /out")
	}
	// With nothing set, the default --config (config) is the reference's
	// default rules directory, which the image holds empty: no rules are
	// baked in, so a ConfigMap mounted at the wrong path loads nothing
	// rather than example rules.
	if wd := final.last("WORKDIR"); wd != "/srv/runtime_data/current" {
		t.Errorf("WORKDIR = %q, want the reference's RUNTIME_ROOT default /srv/runtime_data/current", wd)
	}
	if cps := final.all("COPY"); !slices.Equal(cps, []string{"--from=build /out/ /"}) {
		t.Errorf("final stage COPY %q, want only the build stage's /out: no rules from the build context", cps)
	}
	var emptyRules bool
	for _, run := range build.all("RUN") {
		emptyRules = emptyRules || strings.Contains(run, "mkdir -p") && strings.Contains(run, "/out/srv/runtime_data/current/config")
		for _, f := range strings.Fields(run) {
			if strings.HasPrefix(f, "/out/srv/") && f != "/out/srv/runtime_data/current/config" {
				t.Errorf("the build stage puts %s in the image's rules tree: %s", f, run)
			}
		}
	}
	if !emptyRules {
		t.Error("the build stage does not make the empty rules directory /srv/runtime_data/current/config")
	}
	// Files copied from the build context exist and are not ignored.
	ignored := dockerIgnored(t)
	for _, st := range stages {
		for _, cp := range st.all("COPY") {
			if strings.HasPrefix(cp, "--from=") {
				continue
			}
			f := strings.Fields(cp)
			for _, src := range f[:len(f)-1] {
				if strings.HasPrefix(src, "--") || src == "." {
					continue
				}
				if _, err := os.Stat(filepath.Join("..", src)); err != nil {
					t.Errorf("COPY %s: %v", src, err)
				}
				if ignored(src) {
					t.Errorf("COPY %s: excluded by .dockerignore", src)
				}
			}
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "cmd/server"} {
		if ignored(p) {
			t.Errorf(".dockerignore excludes %s, which the build needs", p)
		}
	}
}

// TestGitignoreCoversBuilds: what the docs tell you to build is ignored:
// `go build ./DIR` of each main package (a binary named after the folder,
// in the root), every `go build -o PATH` of the README, docs/, Makefile
// and BENCHMARKS.md inside the repository, and GOBIN=$PWD/... installs.
func TestGitignoreCoversBuilds(t *testing.T) {
	ignored := map[string]bool{}
	for _, l := range strings.Split(string(files.Read(t, "../.gitignore")), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			ignored[strings.TrimSuffix(l, "/")] = true
		}
	}
	mainPackage := regexp.MustCompile(`(?m)^package main$`)
	var mains []string
	covered := func(path string) bool {
		first, _, _ := strings.Cut(strings.TrimPrefix(filepath.ToSlash(path), "./"), "/")
		return ignored["/"+first]
	}
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if n := d.Name(); p != ".." && (strings.HasPrefix(n, ".") || n == "testdata") {
			return filepath.SkipDir
		}
		gos, _ := filepath.Glob(filepath.Join(p, "*.go"))
		for _, g := range gos {
			if !strings.HasSuffix(g, "_test.go") && mainPackage.Match(files.Read(t, g)) {
				mains = append(mains, filepath.Base(p))
				if !covered(filepath.Base(p)) {
					t.Errorf("go build ./%s writes %s, which .gitignore does not cover", strings.TrimPrefix(p, "../"), filepath.Base(p))
				}
				break
			}
		}
		return nil
	})
	if err != nil || !slices.Contains(mains, "server") {
		t.Fatalf("main packages %q: %v", mains, err)
	}
	docs, _ := filepath.Glob("../docs/*.md")
	out := regexp.MustCompile(`go build [^\n]*?-o ([^ \n]+)`)
	gobin := regexp.MustCompile(`GOBIN=\$PWD/([^ \n]+)`)
	for _, f := range append(docs, "../README.md", "../Makefile", "../BENCHMARKS.md") {
		text := string(files.Read(t, f))
		for _, m := range append(out.FindAllStringSubmatch(text, -1), gobin.FindAllStringSubmatch(text, -1)...) {
			if p := m[1]; !filepath.IsAbs(p) && !covered(p) {
				t.Errorf("%s builds %s, which .gitignore does not cover", f, p)
			}
		}
	}
}
