package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
)

// The facts of Envoy 1.40 that docs/envoy.md states, each shown with a
// probe RateLimitService that records what Envoy sends.

// probeDescriptors returns what a call carried: each descriptor as
// "k=v,k2=v2" followed by " +N" when it had a hits_addend of N, " -N"
// when is_negative_hits gives them back.
func probeDescriptors(c envoytest.ProbeCall) []string {
	var out []string
	for _, d := range c.Request.GetDescriptors() {
		var kv []string
		for _, e := range d.GetEntries() {
			kv = append(kv, e.GetKey()+"="+e.GetValue())
		}
		s := strings.Join(kv, ",")
		if h := d.GetHitsAddend(); h != nil && d.GetIsNegativeHits() {
			s += fmt.Sprintf(" -%d", h.GetValue())
		} else if h != nil {
			s += fmt.Sprintf(" +%d", h.GetValue())
		}
		out = append(out, s)
	}
	return out
}

// TestEnvoyFactsTransportAuto: transport_api_version AUTO is accepted, at
// load and at the first call, which Envoy makes in V3 (FastLimit serves
// V3 only).
func TestEnvoyFactsTransportAuto(t *testing.T) {
	p := envoytest.StartProbe(t, nil)
	f := startHTTPFront(t, "auto", p.Addr, "transport_api_version: V3", "transport_api_version: AUTO")
	if code := f.client(t).Do(t, "GET", "/").Code; code != 200 {
		t.Fatalf("through Envoy: %d", code)
	}
	c := p.WaitCalls(t, 1, 10*time.Second)[0]
	if c.Request.GetDomain() != "envoy-e2e" || f.rlStat("ok") != 1 {
		t.Errorf("AUTO: the probe got %s, Envoy counted %d OK", protojson.Format(c.Request), f.rlStat("ok"))
	}
}

// hitsRoutes replace http.yaml's catch-all route: the route's own
// rate_limits (hits_addend 3), and RateLimitPerRoute's in
// typed_per_filter_config (hits_addend 5) on /per-route, and on /refund
// with is_negative_hits (2).
const hitsRoutes = `                        - match: { prefix: /refund }
                          route: { cluster: upstream }
                          typed_per_filter_config:
                            envoy.filters.http.ratelimit:
                              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                              rate_limits:
                                - actions: [{ generic_key: { descriptor_key: via, descriptor_value: refund } }]
                                  hits_addend: { number: 2, is_negative_hits: true }
                        - match: { prefix: /per-route }
                          route: { cluster: upstream }
                          typed_per_filter_config:
                            envoy.filters.http.ratelimit:
                              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                              rate_limits:
                                - actions: [{ generic_key: { descriptor_key: via, descriptor_value: per-route } }]
                                  hits_addend: { number: 5 }
                        - match: { prefix: / }
                          route:
                            cluster: upstream
                            rate_limits:
                              - actions: [{ generic_key: { descriptor_key: via, descriptor_value: route } }]
                                hits_addend: { number: 3 }
`

// filterRateLimits are the filter's own rate_limits (hits_addend 7),
// which replace every route's.
const filterRateLimits = `                      domain: envoy-e2e
                      rate_limits:
                        - actions: [{ generic_key: { descriptor_key: via, descriptor_value: filter } }]
                          hits_addend: { number: 7 }
`

// TestEnvoyFactsHitsAddend: a RateLimit's hits_addend is sent from
// RateLimitPerRoute's rate_limits and from the filter's own, and dropped
// without a word from a route's rate_limits; its is_negative_hits marks
// the descriptor's (a refund).
func TestEnvoyFactsHitsAddend(t *testing.T) {
	tmpl := string(envoyTemplate(t, "http.yaml"))
	start := strings.Index(tmpl, "                        - match: { prefix: / }\n")
	end := strings.Index(tmpl, "                http_filters:")
	routes := tmpl[:start] + hitsRoutes + tmpl[end:]
	filter := strings.Replace(tmpl, "                      domain: envoy-e2e\n", filterRateLimits, 1)
	for _, tc := range []struct {
		name, cfg string
		paths     []string
		want      []string
	}{
		{"routes", routes, []string{"/per-route", "/", "/refund"}, []string{"via=per-route +5", "via=route", "via=refund -2"}},
		{"filter", filter, []string{"/"}, []string{"via=filter +7"}},
	} {
		p := envoytest.StartProbe(t, nil)
		f := startFront(t, "hits-"+tc.name, []byte(tc.cfg), map[string]string{tmplRLS: p.Addr,
			tmplUpstream: envoytest.StartUpstream(t, nil).Addr, tmplGRPC: "127.0.0.1:1"})
		c := f.client(t)
		var got []string
		for i, path := range tc.paths {
			c.Do(t, "GET", path)
			got = append(got, strings.Join(probeDescriptors(p.WaitCalls(t, i+1, 10*time.Second)[i]), " "))
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: Envoy sent %q for %v, want %q", tc.name, got, tc.paths, tc.want)
		}
	}
}

// TestEnvoyFactsFilterRateLimitsRefuse: the filter's own rate_limits
// refuse stage and disable_key when the bootstrap loads, and the
// deprecated dynamic_metadata action is refused too (metadata with
// source: DYNAMIC replaces it).
func TestEnvoyFactsFilterRateLimitsRefuse(t *testing.T) {
	tmpl := string(envoyTemplate(t, "http.yaml"))
	for _, tc := range []struct{ extra, want string }{
		{"                          stage: 1\n", "'stage' field and 'disable_key' field are not supported"},
		{"                          disable_key: k\n", "'stage' field and 'disable_key' field are not supported"},
		{"                        - actions: [{ dynamic_metadata: { descriptor_key: k, metadata_key: { key: a, path: [{ key: b }] } } }]\n",
			"Using deprecated option 'envoy.config.route.v3.RateLimit.Action.dynamic_metadata'"},
	} {
		cfg := strings.Replace(tmpl, "                      domain: envoy-e2e\n", filterRateLimits+tc.extra, 1)
		path := filepath.Join(t.TempDir(), "envoy.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := envoytest.Validate(t, path)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("filter rate_limits with %s: err %v, want %q in\n%s", strings.TrimSpace(tc.extra), err, tc.want, out)
		}
	}
}

// TestEnvoyFactsUseRemoteAddress: with use_remote_address true (the
// examples'), remote_address is the connection's peer whatever
// x-forwarded-for says; with false, it is the address x-forwarded-for
// names, which a client chooses.
func TestEnvoyFactsUseRemoteAddress(t *testing.T) {
	for _, tc := range []struct {
		use  bool
		want func(peer string) string
	}{
		{true, func(peer string) string { return peer }},
		{false, func(string) string { return "203.0.113.9" }},
	} {
		p := envoytest.StartProbe(t, nil)
		f := startHTTPFront(t, "xff", p.Addr, "use_remote_address: true", fmt.Sprintf("use_remote_address: %v", tc.use))
		c := f.client(t)
		c.Do(t, "GET", "/", "x-forwarded-for: 203.0.113.9")
		got := probeDescriptors(p.WaitCalls(t, 1, 10*time.Second)[0])
		if want := "path_class=api,remote_address=" + tc.want(c.Source); fmt.Sprint(got) != fmt.Sprint([]string{want}) {
			t.Errorf("use_remote_address %v: Envoy sent %v, want [%s]", tc.use, got, want)
		}
	}
}
