package examples_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
)

// Paths of the quota service example.
const (
	rlqsDir     = "envoy-rlqs"
	rlqsYAML    = "envoy-rlqs/envoy.yaml"
	rlqsRules   = "envoy-rlqs/rules"
	rlqsCompose = "envoy-rlqs/docker-compose.yml"
)

const rlqsFilter = "envoy.filters.http.rate_limit_quota"

// rlqsRequests are requests the example must put in limited buckets:
// each path with the tenant header absent, empty, or set.
func rlqsRequests() []map[string]string {
	var out []map[string]string
	for _, path := range []string{"/login", "/api/orders", "/", "/static/app.js"} {
		for _, tenant := range []*string{nil, ptr(""), ptr("acme"), ptr("gold")} {
			h := map[string]string{":path": path}
			if tenant != nil {
				h["x-tenant"] = *tenant
			}
			out = append(out, h)
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// TestRLQSExample decodes envoy-rlqs/envoy.yaml strictly into Envoy's
// Bootstrap, validates every typed config inside, and checks what Envoy's
// rate_limit_quota filter needs of it (docs/rlqs.md): the RLQS cluster
// speaks HTTP/2 and pings its connections, within FastLimit's ping policy
// and soon enough for its TTL, and health-checks its hosts; the domain
// has rules; every bucket's no_assignment_behavior is a blanket rule and
// its expired fallback lasts whole seconds; and every request, with the
// tenant header absent, empty or set, lands in a bucket (as Envoy's
// matcher builds them: envoysim.Matcher) that a limit of the domain
// matches.
func TestRLQSExample(t *testing.T) {
	bs := loadRLQSBootstrap(t)
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	cfg := rlqsConfig(t)
	name := cfg.GetRlqsServer().GetEnvoyGrpc().GetClusterName()
	c, ok := clusters[name]
	if !ok {
		t.Fatalf("rlqs_server names cluster %q, which %s does not define", name, rlqsYAML)
	}
	checkHTTP2(t, c)
	checkRLQSCluster(t, c)
	rules := loadDir(t, rlqsRules)
	domain := rules.Set.Domain(cfg.GetDomain())
	if domain == nil {
		t.Fatalf("domain %q has no rules in %s", cfg.GetDomain(), rlqsRules)
	}
	m, err := envoysim.NewMatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range rlqsRequests() {
		id, s, ok := m.Match(h)
		if !ok {
			t.Errorf("request %v gets no bucket: Envoy lets it through, unlimited", h)
			continue
		}
		checkBucketSettings(t, fmt.Sprint(id), s)
		entries := make([]descriptors.Entry, 0, len(id))
		for k, v := range id {
			entries = append(entries, descriptors.Entry{Key: k, Value: v})
		}
		if l, _ := descriptors.MatchBucket(domain, entries); l == nil || l.Unlimited || l.ShadowMode {
			t.Errorf("request %v: bucket %v matches no limit of domain %q", h, id, cfg.GetDomain())
		}
	}
}

// TestRLQSExampleLimits runs the example's filter config (its matcher and
// bucket settings, in envoysim) against the quota service on the
// example's rules: requests without the tenant header, at 1000/s, are
// held to the 300/s of {name: api}.
func TestRLQSExampleLimits(t *testing.T) {
	cfg := rlqsConfig(t)
	m, err := envoysim.NewMatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	set := loadDir(t, rlqsRules).Set
	clock := envoysim.NewManualClock(time.Unix(1_900_000_000, 0))
	svc, err := rlqs.New(rlqs.Options{Rules: func() *descriptors.Set { return set }, Store: demand.NewMemory(clock.Now),
		Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Close(ctx) // before the server's stop (cleanups run last first)
	})
	tally := envoysim.NewTally()
	cc, _ := envoysim.InProcess(t, svc.Register, grpc.ChainStreamInterceptor(tally.Interceptor()))
	e, err := envoysim.New(envoysim.Config{Domain: cfg.GetDomain(), Matcher: m}, clock, tally.Dialer(envoysim.GRPCDialer(cc)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fleet := envoysim.Fleet{Idle: svc.Idle, Tally: tally}
	fleet.Add(e)
	noTenant := map[string]string{":path": "/api/orders"}
	run := func(d time.Duration) (allowed int) {
		for step := 10 * time.Millisecond; d > 0; d -= step {
			fleet.Run(clock, step)
			for range 10 { // 1000/s
				if e.Serve(noTenant) {
					allowed++
				}
			}
		}
		return allowed
	}
	run(15 * time.Second)
	rate := float64(run(10*time.Second)) / 10
	if rate < 270 || rate > 330 {
		t.Errorf("requests without x-tenant admitted at %.1f/s, want the 300/s of {name: api}", rate)
	}
	if st := e.Stats(); st.Unbucketed != 0 || st.GapDecisions != 0 {
		t.Errorf("stats = %+v", st)
	}
	if v := e.Violations(); v.Total() != 0 {
		t.Errorf("violations: %v", v)
	}
}

// TestRLQSExampleTTL: every TTL the example's comments state is
// FastLimit's default, --rlqs-ttl-periods of Envoy's 5 s period.
func TestRLQSExampleTTL(t *testing.T) {
	ttl := quota.TTL(5*time.Second, rlqs.DefaultTTLPeriods)
	said := regexp.MustCompile(`TTL\s*(?:#\s*)?(?:\(|of )(\d+) s`).FindAllStringSubmatch(string(files.Read(t, rlqsYAML)), -1)
	if len(said) == 0 {
		t.Fatalf("%s states no TTL", rlqsYAML)
	}
	for _, m := range said {
		if n, _ := strconv.ParseInt(m[1], 10, 64); n != ttl {
			t.Errorf("%s says %q: the TTL is %d s", rlqsYAML, m[0], ttl)
		}
	}
}

func loadRLQSBootstrap(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	return loadBootstrapFile(t, rlqsYAML)
}

// checkRLQSCluster checks that the RLQS cluster's HTTP/2 keepalive is
// what FastLimit's ping policy permits (--grpc-keepalive-min-time) and
// finds a lost replica in time: the slowest ping and its timeout, then
// the next report's tick, within an assignment's TTL of the last answer
// (docs/rlqs.md, "A replica lost"); and that it health-checks its hosts
// by gRPC.
func checkRLQSCluster(t *testing.T, c *clusterv3.Cluster) {
	t.Helper()
	var opts upstreamhttpv3.HttpProtocolOptions
	if err := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&opts); err != nil {
		t.Fatal(err)
	}
	ka := opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions().GetConnectionKeepalive()
	interval, timeout := ka.GetInterval().AsDuration(), ka.GetTimeout().AsDuration()
	if interval == 0 || timeout == 0 {
		t.Fatalf("cluster %s has no connection_keepalive: a replica lost without a reset goes unnoticed", c.GetName())
	}
	if interval <= settings.DefaultGRPCPingMinTime {
		t.Errorf("connection_keepalive.interval %v: FastLimit refuses pings more often than %v", interval, settings.DefaultGRPCPingMinTime)
	}
	jitter := 0.15
	if j := ka.GetIntervalJitter(); j != nil {
		jitter = j.GetValue() / 100
	}
	const period = 5 * time.Second
	ttl := time.Duration(quota.TTL(period, rlqs.DefaultTTLPeriods)) * time.Second
	// The last answer came up to a period before the loss; the ping after
	// it, its timeout, then up to a period to the next report.
	if worst := period + time.Duration(float64(interval)*(1+jitter)) + timeout + period; worst >= ttl {
		t.Errorf("a lost replica is left up to %v after the last answer, not within the TTL of %v", worst, ttl)
	}
	var grpcChecked bool
	for _, hc := range c.GetHealthChecks() {
		grpcChecked = grpcChecked || hc.GetGrpcHealthCheck() != nil
	}
	if !grpcChecked {
		t.Errorf("cluster %s has no gRPC health check", c.GetName())
	}
}

// rlqsConfig returns the quota filter's config; it must come before the
// router, the last filter.
func rlqsConfig(t *testing.T) *rlqsv3.RateLimitQuotaFilterConfig {
	t.Helper()
	cfg, filters, err := envoysim.FilterConfig(files.Read(t, rlqsYAML))
	if err != nil {
		t.Fatalf("%s: %v", rlqsYAML, err)
	}
	if i := slices.Index(filters, rlqsFilter); i < 0 || i == len(filters)-1 || filters[len(filters)-1] != routerFilter {
		t.Errorf("%s filters %v: %s must come before the router, the last filter", rlqsYAML, filters, rlqsFilter)
	}
	return cfg
}

// checkBucketSettings checks the settings Envoy reads in its own way.
func checkBucketSettings(t *testing.T, bucket string, s *rlqsv3.RateLimitQuotaBucketSettings) {
	t.Helper()
	if d := s.GetReportingInterval().AsDuration(); d != 5*time.Second {
		t.Errorf("bucket %s: reporting_interval %v: Envoy reports every 5s whatever it says; say 5s", bucket, d)
	}
	if na := s.GetNoAssignmentBehavior(); na != nil {
		if _, ok := na.GetFallbackRateLimit().GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !ok {
			t.Errorf("bucket %s: no_assignment_behavior must be a blanket rule (Envoy keeps no token bucket behind it)", bucket)
		}
	}
	if ex := s.GetExpiredAssignmentBehavior(); ex != nil {
		if ex.GetReuseLastAssignment() != nil {
			t.Errorf("bucket %s: reuse_last_assignment is not implemented by Envoy", bucket)
		}
		if d := ex.GetExpiredAssignmentBehaviorTimeout().AsDuration(); d < time.Second || d%time.Second != 0 {
			t.Errorf("bucket %s: expired_assignment_behavior_timeout %v: Envoy reads whole seconds only", bucket, d)
		}
		if tb := ex.GetFallbackRateLimit().GetTokenBucket(); tb != nil &&
			(tb.GetTokensPerFill() == nil || tb.GetFillInterval().AsDuration() < time.Second) {
			t.Errorf("bucket %s: fallback token bucket %v: Envoy reads an unset tokens_per_fill as 0 and whole seconds of fill_interval", bucket, tb)
		}
	}
}

// rlqsComposeFile is what TestRLQSCompose reads of the compose file.
type rlqsComposeFile struct {
	Services map[string]struct {
		composeService `yaml:",inline"`
		Networks       map[string]struct {
			Aliases []string `yaml:"aliases"`
		} `yaml:"networks"`
	} `yaml:"services"`
}

// TestRLQSCompose checks envoy-rlqs/docker-compose.yml (no Docker engine
// runs here): Envoy (1.33 or later) runs the example's envoy.yaml, whose
// clusters name compose services or their aliases at the ports those
// serve; two FastLimit replicas, built from the repository, run with
// --rlqs on the same Redis under different replica names, each loading
// the example's rules directory; Redis and the echo upstream are there.
func TestRLQSCompose(t *testing.T) {
	var cf rlqsComposeFile
	if err := yaml.Unmarshal(files.Read(t, rlqsCompose), &cf); err != nil {
		t.Fatalf("%s: %v", rlqsCompose, err)
	}
	resolve := func(src string) string { return filepath.Clean(filepath.Join(rlqsDir, src)) }
	hosts := map[string][]string{} // host name -> services
	for name, s := range cf.Services {
		hosts[name] = append(hosts[name], name)
		for _, n := range s.Networks {
			for _, a := range n.Aliases {
				hosts[a] = append(hosts[a], name)
			}
		}
	}
	envoy, ok := cf.Services["envoy"]
	if !ok {
		t.Fatal("no envoy service")
	}
	if m := regexp.MustCompile(`^envoyproxy/envoy:v1\.(\d+)`).FindStringSubmatch(envoy.Image); m == nil {
		t.Errorf("envoy image %q is not the official envoyproxy/envoy", envoy.Image)
	} else if minor, _ := strconv.Atoi(m[1]); minor < 33 {
		t.Errorf("envoy image %q: the RLQS global client needs Envoy 1.33 or later", envoy.Image)
	}
	var mounted bool
	for _, v := range envoy.volumes() {
		mounted = mounted || resolve(v.source) == filepath.Clean(rlqsYAML) && v.target == flagValue(envoy.command(), "c")
	}
	if !mounted {
		t.Errorf("envoy does not run %s (-c and a volume)", rlqsYAML)
	}
	if !publishes(envoy.composeService, 10000) {
		t.Error("envoy does not publish port 10000")
	}

	var replicas []string
	redisURLs, names := map[string]bool{}, map[string]bool{}
	grpcPorts := map[string]int{} // service -> the port it serves gRPC on
	for name, s := range cf.Services {
		if s.Build == nil {
			continue
		}
		replicas = append(replicas, name)
		ctx, df := s.build()
		if _, err := os.Stat(filepath.Join(resolve(ctx), df)); err != nil || resolve(ctx) != ".." {
			t.Errorf("%s is not built from the repository's Dockerfile: %v", name, err)
		}
		st, err := settings.Parse("fastlimit", s.command(), func(k string) string { return s.env()[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := st.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !st.RLQS.Enabled {
			t.Errorf("%s does not run with --rlqs", name)
		}
		redisURLs[st.Redis.Client.URL] = true
		names[st.RLQS.Replica] = true
		if _, p, err := net.SplitHostPort(st.GRPCAddr); err == nil {
			grpcPorts[name], _ = strconv.Atoi(p)
		}
		var rulesMounted bool
		for _, v := range s.volumes() {
			rulesMounted = rulesMounted || v.target == st.Config && resolve(v.source) == filepath.Clean(rlqsRules)
		}
		if !rulesMounted {
			t.Errorf("%s: --config %q is not the mounted %s", name, st.Config, rlqsRules)
		}
	}
	if len(replicas) != 2 {
		t.Fatalf("FastLimit replicas %v, want two", replicas)
	}
	if len(redisURLs) != 1 || len(names) != 2 {
		t.Errorf("the replicas use Redis %v and names %v: want one Redis and two names", redisURLs, names)
	}
	for u := range redisURLs {
		if host, _, _ := net.SplitHostPort(regexp.MustCompile(`^redis://([^/]+).*`).ReplaceAllString(u, "$1")); len(hosts[host]) != 1 {
			t.Errorf("Redis %q is no compose service", u)
		}
	}
	bs := loadRLQSBootstrap(t)
	for _, c := range bs.GetStaticResources().GetClusters() {
		host, port := clusterEndpoint(c)
		svcs := hosts[host]
		if len(svcs) == 0 {
			t.Errorf("cluster %s points at %s, which is no compose service or alias", c.GetName(), host)
		}
		if c.GetName() != rlqsConfig(t).GetRlqsServer().GetEnvoyGrpc().GetClusterName() {
			continue
		}
		if len(svcs) != 2 {
			t.Errorf("the RLQS cluster's %s resolves to %v, want both replicas", host, svcs)
		}
		for _, s := range svcs {
			if grpcPorts[s] != int(port) {
				t.Errorf("the RLQS cluster dials %s:%d; %s serves gRPC on %d", host, port, s, grpcPorts[s])
			}
		}
	}
}
