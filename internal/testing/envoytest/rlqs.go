package envoytest

import (
	"fmt"
	"strings"
	"time"
)

// RLQS configures a bootstrap of Envoy's rate_limit_quota filter in front
// of a direct 200 answer: every request whose Header is set is one of the
// bucket {name: <Header's value>}, decided by the filter from the RLQS
// servers' assignments (429 when denied); a request without it gets no
// bucket and passes.
type RLQS struct {
	// Listen is the listener's address (ListenerAddr).
	Listen string
	// Servers are the RLQS cluster's hosts, host:port (FastLimit's gRPC
	// listeners), round robin.
	Servers []string
	// Domain is the filter's domain.
	Domain string
	// Header names the header whose value is the bucket's name (default
	// x-bucket).
	Header string
	// NoAssignment is no_assignment_behavior's blanket rule (default
	// ALLOW_ALL).
	NoAssignment string
	// Expired, if set, is expired_assignment_behavior: a token bucket of
	// this many requests a second (its burst too) for ExpiredTimeout
	// (whole seconds).
	Expired        int
	ExpiredTimeout time.Duration
	// Keepalive is the RLQS cluster's HTTP/2 connection_keepalive
	// interval and timeout (zero: none).
	KeepaliveInterval, KeepaliveTimeout time.Duration
	// HealthChecks adds the cluster's gRPC health checks (every 1 s, a
	// host unhealthy after 2 failures, healthy after 1 success).
	HealthChecks bool
	// Priorities puts each server in a priority of its own, in order,
	// instead of one round robin: streams go to the first healthy one.
	Priorities bool
}

// Bootstrap returns the RLQS bootstrap, in YAML.
func (c RLQS) Bootstrap() ([]byte, error) {
	if c.Header == "" {
		c.Header = "x-bucket"
	}
	if c.NoAssignment == "" {
		c.NoAssignment = "ALLOW_ALL"
	}
	lh, lp, err := HostPort(c.Listen)
	if err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	var hosts strings.Builder
	for i, s := range c.Servers {
		h, p, err := HostPort(s)
		if err != nil {
			return nil, fmt.Errorf("server %q: %w", s, err)
		}
		switch {
		case c.Priorities:
			fmt.Fprintf(&hosts, "          - priority: %d\n            lb_endpoints:\n", i)
		case i == 0:
			hosts.WriteString("          - lb_endpoints:\n")
		}
		fmt.Fprintf(&hosts, "              - endpoint: {address: {socket_address: {address: %q, port_value: %d}}}\n", h, p)
	}
	expired := ""
	if c.Expired > 0 {
		expired = fmt.Sprintf(`
                              expired_assignment_behavior:
                                fallback_rate_limit:
                                  token_bucket: {max_tokens: %d, tokens_per_fill: %d, fill_interval: 1s}
                                expired_assignment_behavior_timeout: %ds`, c.Expired, c.Expired, int(c.ExpiredTimeout/time.Second))
	}
	keepalive := ""
	if c.KeepaliveInterval > 0 {
		keepalive = fmt.Sprintf("connection_keepalive: {interval: %s, timeout: %s}", seconds(c.KeepaliveInterval), seconds(c.KeepaliveTimeout))
	}
	health := ""
	if c.HealthChecks {
		health = `
      health_checks:
        - timeout: 1s
          interval: 1s
          unhealthy_threshold: 2
          healthy_threshold: 1
          no_traffic_interval: 1s
          grpc_health_check: {}`
	}
	return fmt.Appendf(nil, `static_resources:
  listeners:
    - name: in
      address: {socket_address: {address: %q, port_value: %d}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: in
                route_config:
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes:
                        - match: {prefix: /}
                          direct_response: {status: 200}
                http_filters:
                  - name: envoy.filters.http.rate_limit_quota
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
                      rlqs_server: {envoy_grpc: {cluster_name: rlqs}}
                      domain: %q
                      bucket_matchers:
                        on_no_match:
                          action:
                            name: by-header
                            typed_config:
                              "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                              bucket_id_builder:
                                bucket_id_builder:
                                  name:
                                    custom_value:
                                      name: bucket
                                      typed_config:
                                        "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                                        header_name: %q
                              reporting_interval: 5s
                              no_assignment_behavior: {fallback_rate_limit: {blanket_rule: %s}}%s
                              deny_response_settings: {http_status: {code: 429}}
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: rlqs
      type: STATIC
      connect_timeout: 1s
      lb_policy: ROUND_ROBIN
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config:
            http2_protocol_options: {%s}%s
      load_assignment:
        cluster_name: rlqs
        endpoints:
%s`, lh, lp, c.Domain, c.Header, c.NoAssignment, expired, keepalive, health, hosts.String()), nil
}

// seconds writes d as a proto Duration's YAML ("1.5s").
func seconds(d time.Duration) string {
	return fmt.Sprintf("%gs", d.Seconds())
}
