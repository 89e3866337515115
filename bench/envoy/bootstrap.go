package main

import (
	"fmt"
	"net"
	"time"
)

// bootstrap returns the Envoy configuration of a setup: a listener at
// listen routing every request to upstream, with the rate-limit filter
// calling rls before the router (none when rls is ""). The route sends one
// descriptor, (bench=envoy, user=<x-user>); the filter fails closed
// (failure_mode_deny), so that a failed call shows as an error.
func bootstrap(listen, admin, upstream, rls string, timeout time.Duration) string {
	filter, cluster := "", ""
	if rls != "" {
		filter = fmt.Sprintf(`
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                      domain: bench
                      timeout: %s
                      failure_mode_deny: true
                      rate_limit_service:
                        transport_api_version: V3
                        grpc_service: {envoy_grpc: {cluster_name: rls}}`, fmt.Sprintf("%gs", timeout.Seconds()))
		cluster = `
    - name: rls
      type: STATIC
      connect_timeout: 5s
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: {http2_protocol_options: {}}
      load_assignment:
        cluster_name: rls
        endpoints: [{lb_endpoints: [{endpoint: {address: ` + socket(rls) + `}}]}]`
	}
	return `admin:
  address: ` + socket(admin) + `
static_resources:
  listeners:
    - name: bench
      address: ` + socket(listen) + `
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: bench
                route_config:
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes:
                        - match: {prefix: /}
                          route:
                            cluster: upstream
                            rate_limits:
                              - actions:
                                  - generic_key: {descriptor_key: bench, descriptor_value: envoy}
                                  - request_headers: {header_name: x-user, descriptor_key: user}
                http_filters:` + filter + `
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: upstream
      type: STATIC
      connect_timeout: 5s
      load_assignment:
        cluster_name: upstream
        endpoints: [{lb_endpoints: [{endpoint: {address: ` + socket(upstream) + `}}]}]` + cluster + "\n"
}

// socket is addr as a socket_address.
func socket(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("{socket_address: {address: %q, port_value: %s}}", host, port)
}
