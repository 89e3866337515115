package settings

import (
	"flag"
	"io"
	"time"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/observe/refstats"
	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/internal/observe/tracing"
	"github.com/fastlimit/fastlimit/internal/source/xds"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rls"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// flagGroup is a titled part of the flags, as the docs' table shows it.
type flagGroup struct {
	title string
	add   func(fs *flag.FlagSet, s *Settings)
}

// flagGroups define every flag in the order of the docs.
var flagGroups = []flagGroup{
	{"Listeners and requests", addServingFlags},
	{"Rules", addRulesFlags},
	{"Store", addStoreFlags},
	{"Redis deployment", func(fs *flag.FlagSet, s *Settings) { addRedisFlags(fs, &s.Redis) }},
	{"Responses", addHeaderFlags},
	{"Health", func(fs *flag.FlagSet, s *Settings) { addHealthFlags(fs, &s.Health) }},
	{"Admin listener and metrics", func(fs *flag.FlagSet, s *Settings) { addAdminFlags(fs, &s.Admin) }},
	{"Rules over xDS", func(fs *flag.FlagSet, s *Settings) { addXDSFlags(fs, &s.XDS) }},
	{"gRPC TLS", func(fs *flag.FlagSet, s *Settings) { addTLSFlags(fs, &s.TLS) }},
	{"Tracing", func(fs *flag.FlagSet, s *Settings) { addTracingFlags(fs, &s.Tracing) }},
	{"The reference's metrics", func(fs *flag.FlagSet, s *Settings) { addRefStatsFlags(fs, &s.RefStats) }},
	{"Rate Limit Quota Service", func(fs *flag.FlagSet, s *Settings) { addRLQSFlags(fs, &s.RLQS) }},
	{"Deprecated flags", addDeprecatedFlags}, // last: its aliases need their flags
}

// groupNotes are the Markdown under some groups' titles.
var groupNotes = map[string]string{"Deprecated flags": "Old spellings, most of them envoyproxy/ratelimit's variable names: they keep working, " +
	"and each one given logs a warning at start naming the flag to use. The variables of their environment column " +
	"are the reference's and are not deprecated: they keep working as [migrating.md](migrating.md#the-references-variables) " +
	"says (but `REDIS_CONNS`, as `--redis-conns`, has no effect).\n\n"}

// newFlagSet defines every flag on s.
func newFlagSet(name string, s *Settings, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	for _, g := range flagGroups {
		g.add(fs, s)
	}
	return fs
}

// addServingFlags defines the listeners, request bounds, drain and logs.
func addServingFlags(fs *flag.FlagSet, s *Settings) {
	fs.StringVar(&s.GRPCAddr, "grpc-addr", ":8081", "gRPC listen address (Envoy's rate-limit service), or unix:PATH for a unix socket")
	fs.StringVar(&s.HTTPAddr, "http-addr", ":8080", "HTTP listen address (/healthcheck, /ready, /json)")
	fs.DurationVar(&s.GRPCMaxConnectionAge, "grpc-max-connection-age", 24*time.Hour,
		"send GOAWAY to gRPC connections older than this, so that clients spread over new replicas (0: never)")
	fs.DurationVar(&s.GRPCMaxConnectionAgeGrace, "grpc-max-connection-age-grace", time.Hour,
		"after --grpc-max-connection-age, how long calls in flight may take before the connection is closed")
	fs.IntVar(&s.GRPCStreamWorkers, "grpc-stream-workers", 0, "gRPC server goroutines that serve calls (0: one new goroutine per call)")
	addGRPCBoundsFlags(fs, &s.GRPC)
	fs.IntVar(&s.MaxRequestBytes, "max-request-bytes", 4<<20,
		"largest gRPC request accepted, in bytes: what bounds a request, as in envoyproxy/ratelimit (long values are hashed into keys)")
	fs.IntVar(&s.MaxDescriptors, "max-descriptors", 0, "most descriptors in one request (0: no cap but --max-request-bytes)")
	fs.IntVar(&s.MaxEntries, "max-entries", 0, "most entries in one descriptor (0: no cap but --max-request-bytes)")
	fs.IntVar(&s.MaxEntryBytes, "max-entry-bytes", 0, "longest descriptor entry key or value, in bytes (0: no cap but --max-request-bytes)")
	fs.DurationVar(&s.Drain, "drain", 5*time.Second,
		"on SIGTERM, how long /ready and gRPC health fail while the server still answers, so that load balancers stop sending first (0: stop at once)")
	s.LogLevel, s.LogFormat = "info", LogJSON
	fs.Var(checked{&s.LogLevel, parseLogLevel}, "log-level", "log level: trace (as debug), debug, info, warn (or warning), error, panic, fatal, in any case")
	fs.Var(checked{&s.LogFormat, parseLogFormat}, "log-format", "log format: json, text, or console (text in colour)")
}

// addRulesFlags defines where rules come from and how domains combine.
func addRulesFlags(fs *flag.FlagSet, s *Settings) {
	fs.StringVar(&s.ConfigDir, "config", "config",
		"directory of rules files (YAML, one domain each); without it, envoyproxy/ratelimit's RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY give it, if set")
	fs.BoolVar(&s.MergeDomainConfig, "merge-domain-config", false,
		"merge rules files of the same domain (their top-level descriptors side by side) instead of refusing them")
	fs.StringVar(&s.RulesOverlay, "rules-overlay", "",
		"rules over xDS: a file of FastLimit's extensions (algorithm, burst, cost, ...) by domain and descriptor path, applied to every snapshot and re-read when it changes (docs/xds.md)")
	fs.BoolVar(&s.Atomic, "atomic", false,
		"decide every request's descriptors all or nothing (a domain's atomic: true does the same for that domain)")
	fs.Int64Var(&s.RulesMaxFileBytes, "rules-max-file-bytes", rules.DefaultMaxFileBytes,
		"largest rules file loaded, in bytes; a larger one fails the load (the rules in force stay), before it is read (0: no limit)")
	fs.Int64Var(&s.RulesMaxTotalBytes, "rules-max-total-bytes", rules.DefaultMaxTotalBytes,
		"most bytes of rules files loaded in all; past it the load fails, naming the file that passed it (0: no limit)")
}

// Defaults of the gRPC bounds.
const (
	DefaultGRPCMaxConns       = 10_000
	DefaultGRPCMaxStreams     = 1000
	DefaultGRPCRequestTimeout = 10 * time.Second
	DefaultGRPCMaxIdle        = 5 * time.Minute
	DefaultGRPCPingMinTime    = 10 * time.Second
)

// addGRPCBoundsFlags defines what gRPC clients can open and hold.
func addGRPCBoundsFlags(fs *flag.FlagSet, o *GRPCBounds) {
	fs.IntVar(&o.MaxConnections, "grpc-max-connections", DefaultGRPCMaxConns,
		"most open gRPC connections; the open-files limit lowers it (the limit, less the Redis pool, the HTTP listeners' connections and 64); connections past it are closed at once (0: the open-files limit alone)")
	fs.IntVar(&o.MaxConcurrentStreams, "grpc-max-concurrent-streams", DefaultGRPCMaxStreams,
		"most calls in flight on one gRPC connection; more are refused (ResourceExhausted) and Envoy opens another connection")
	fs.DurationVar(&o.RequestTimeout, "grpc-request-timeout", DefaultGRPCRequestTimeout,
		"longest a unary gRPC call may take from its headers, the arrival of its request included; a call still unfinished is dropped (0: no bound)")
	fs.DurationVar(&o.MaxConnectionIdle, "grpc-max-connection-idle", DefaultGRPCMaxIdle,
		"close a gRPC connection that has had no call for this long (GOAWAY; Envoy reconnects when it needs to) (0: never)")
	fs.DurationVar(&o.KeepaliveMinTime, "grpc-keepalive-min-time", DefaultGRPCPingMinTime,
		"shortest interval between a client's HTTP/2 keepalive pings, with or without calls; a client pinging more often is disconnected")
}

// addStoreFlags defines the store: Redis or the embedded one, and its failure policy.
func addStoreFlags(fs *flag.FlagSet, s *Settings) {
	fs.StringVar(&s.RedisURL, "redis-url", "",
		"Redis: redis:// or rediss:// URL, host:port, or a unix socket's path; empty runs on the embedded in-memory store")
	fs.StringVar(&s.KeyPrefix, "key-prefix", "ratelimit", "prefix of every store key")
	fs.DurationVar(&s.StoreTimeout, "store-timeout", 50*time.Millisecond,
		"longest wait for the store on one request; keep it at or below Envoy's rate-limit filter timeout")
	fs.StringVar(&s.OnStoreError, "on-store-error", limiter.FailError.String(),
		"when the store fails: allow (answer OK), deny (answer OVER_LIMIT) or error (answer Unavailable; Envoy's failure_mode_deny decides)")
	fs.IntVar(&s.RedisPoolSize, "redis-pool-size", 0, "Redis connections per server (0: 10 per CPU)")
	fs.DurationVar(&s.RedisDialTimeout, "redis-dial-timeout", 0,
		"Redis connect timeout: dial, TLS and AUTH/SELECT, done in the background; requests wait for it no longer than --store-timeout (0: the URL's dial_timeout, else 1s)")
	fs.DurationVar(&s.RedisReadTimeout, "redis-read-timeout", 0,
		"Redis read timeout (0: 3s): how long a script call may await its reply, whether or not its requests still wait (they wait at most --store-timeout)")
	fs.DurationVar(&s.RedisWriteTimeout, "redis-write-timeout", 0, "Redis socket write timeout (0: the read timeout)")
	fs.IntVar(&s.RedisBatches, "redis-batches", 2,
		"script calls in flight per Redis server (per cluster master); requests that arrive meanwhile share the next (0: one call per request)")
	fs.DurationVar(&s.RedisPipelineWindow, "redis-pipeline-window", time.Millisecond,
		"the longest a request waits for company before its script call to Redis is sent, so that Redis decides more per call, where requests arrive fast enough to expect some (or many wait at once) (0: never); a quiet server, and a lone caller, never wait")
	fs.IntVar(&s.RedisPipelineLimit, "redis-pipeline-limit", 0,
		"a script call stops waiting (--redis-pipeline-window) once this many decisions wait (0: 255)")
	fs.IntVar(&s.OverLimitCacheBytes, "over-limit-cache-bytes", 0,
		"Redis: memory for a local cache of keys found over their limit, denied without a Redis round trip until Redis said they could pass (0: off; counted as 256 bytes a key)")
	fs.IntVar(&s.BreakerFailures, "breaker-failures", 5,
		"independent store failures in a row that open the circuit breaker; calls that fail together (one connection reset, one stall) count once, a success resets the count")
	fs.DurationVar(&s.BreakerCooldown, "breaker-cooldown", 500*time.Millisecond,
		"while the circuit is open (requests answered at once), how often it pings the store in the background; the first answer closes it")
	fs.DurationVar(&s.MemorySweepInterval, "memory-sweep-interval", time.Minute,
		"embedded store: how often expired windows and buckets are swept from memory")
	fs.IntVar(&s.MemoryMaxKeys, "memory-max-keys", 1_000_000,
		"embedded store: most windows and buckets held (about 170 bytes each with 50-byte keys); when full, a request that needs a new one fails as a store error and --on-store-error answers it (0: no bound)")
}

func addHeaderFlags(fs *flag.FlagSet, s *Settings) {
	o := &s.Headers
	fs.StringVar(&o.Mode, "response-headers", rls.HeadersOff,
		"rate-limit response headers: off, ietf (RateLimit-Policy and RateLimit), legacy (RateLimit-Limit/-Remaining/-Reset)")
	fs.StringVar(&o.LimitHeader, "limit-limit-header", "RateLimit-Limit", "legacy mode: name of the limit header")
	fs.StringVar(&o.RemainingHeader, "limit-remaining-header", "RateLimit-Remaining", "legacy mode: name of the remaining header")
	fs.StringVar(&o.ResetHeader, "limit-reset-header", "RateLimit-Reset", "legacy mode: name of the reset header")
	fs.BoolVar(&o.RequestHeaders, "request-headers", false,
		"add the legacy limit, remaining and reset headers, of the status legacy response headers would describe, to the request Envoy forwards upstream (request_headers_to_add), on every answer with a limit")
	fs.StringVar(&o.RequestLimitHeader, "limit-request-limit-header", "RateLimit-Limit", "--request-headers: name of the limit header")
	fs.StringVar(&o.RequestRemainingHeader, "limit-request-remaining-header", "RateLimit-Remaining", "--request-headers: name of the remaining header")
	fs.StringVar(&o.RequestResetHeader, "limit-request-reset-header", "RateLimit-Reset", "--request-headers: name of the reset header")
	fs.BoolVar(&o.DynamicMetadata, "response-dynamic-metadata", false,
		"answer with dynamic_metadata as envoyproxy/ratelimit's main builds it (every descriptor, the merged metadata of those that passed) and FastLimit's fastlimit.overLimit, the descriptors over their limit")
	fs.BoolVar(&o.ShadowMode, "shadow-mode", false, "global shadow mode: the overall code is always OK; statuses still tell")
	fs.BoolVar(&s.QuotaMode, "quota-mode", false,
		"global quota mode: every descriptor but an unlimited one is a quota descriptor; the request is OVER_LIMIT only when all of them are over (envoyproxy/ratelimit#1059)")
}
func addAdminFlags(fs *flag.FlagSet, o *Admin) {
	fs.StringVar(&o.Addr, "admin-addr", "127.0.0.1:6070",
		"admin HTTP address: /metrics, /rlconfig, /stats, /v1/rules, /v1/usage, /v1/quota, /v1/top, /v1/explain, /v1/counters/ (and /debug/pprof/ with --pprof), a page or index at /; empty or off disables it. "+
			"Bound beyond loopback, its reads of identifiers need the writes' authorization (docs/security.md)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "",
		"a second address that serves /metrics alone, for Prometheus, when the admin address stays on loopback; empty or off: none")
	fs.StringVar(&o.AllowedHosts, "admin-allowed-hosts", "",
		"names the admin listener answers to in the Host header besides IP addresses, localhost and --admin-addr's host, comma-separated (e.g. a headless Service's); others get 421, against DNS rebinding")
	fs.BoolVar(&o.Pprof, "pprof", false, "serve /debug/pprof/ on the admin address")
	fs.Float64Var(&o.NearLimitRatio, "near-limit-ratio", 0.8,
		"share of a limit used past which allowed hits also count as near the limit, in (0, 1]")
	fs.IntVar(&o.MaxDetailedMetricSeries, "max-detailed-metric-series", metrics.DefaultMaxDetailedSeries,
		"most rule series labelled with request values (detailed_metric, value_to_metric); past it, hits count under the rule's path and in fastlimit_rule_detailed_series_folded_total (0: no bound)")
	fs.IntVar(&o.TopKeys, "top-keys", top.DefaultKeys,
		"identifiers (descriptor values) kept per rule, by hits and by over-limit hits, for /v1/top, fastlimit top and the admin page (0: none kept)")
	fs.DurationVar(&o.TopWindow, "top-window", top.DefaultWindow,
		"decay of the top identifiers' counts: a hit counts e^(-age/window), so that at a steady rate a count is the hits of one window")
	fs.BoolVar(&o.LogTopLimited, "log-top-limited", true,
		"log a rule's top over-limit identifiers, at most once a minute per rule, while it limits any (needs --top-keys above 0)")
	fs.StringVar(&o.TokenFile, "admin-token-file", "",
		"file of the bearer tokens that authorize admin writes (/v1/counters/reset, /v1/counters/refund), and reads of identifiers beyond loopback: one name:token per line, tokens of 16 bytes or more; re-read when it changes, a missing, empty or malformed version putting no token in force")
	fs.StringVar(&o.TLSCert, "admin-tls-cert", "", "certificate file (PEM) of the admin listener, which then serves HTTPS only; rotations are taken in")
	fs.StringVar(&o.TLSKey, "admin-tls-key", "", "private key file (PEM) of --admin-tls-cert")
	fs.StringVar(&o.TLSClientCA, "admin-tls-client-ca", "",
		"CA file (PEM) of the client certificates that authorize what --admin-token-file's tokens authorize")
}
func addXDSFlags(fs *flag.FlagSet, o *XDS) {
	fs.StringVar(&o.ConfigType, "config-type", configTypeFile,
		"where rules come from: FILE (--config) or GRPC_XDS_SOTW (an xDS management server, --xds-server)")
	fs.BoolVar(&o.StartWithoutRules, "xds-start-without-rules", false,
		"GRPC_XDS_SOTW: serve (and pass /healthcheck) before the first rules arrive, answering requests with an error until then; false waits for them before listening")
	fs.StringVar(&o.NodeID, "xds-node-id", "default", "GRPC_XDS_SOTW: node id sent to the xDS server, which picks the snapshot by it")
	fs.StringVar(&o.NodeMetadata, "xds-node-metadata", "",
		"GRPC_XDS_SOTW: node metadata sent to the xDS server, as key=value,key2=value2")
	fs.StringVar(&o.Server, "xds-server", "localhost:18000", "GRPC_XDS_SOTW: the xDS management server, host:port (a gRPC target)")
	fs.StringVar(&o.Headers, "xds-headers", "",
		"GRPC_XDS_SOTW: headers (gRPC metadata) sent to the xDS server, as name:value,name2:value2")
	fs.BoolVar(&o.TLS, "xds-tls", false, "GRPC_XDS_SOTW: connect to the xDS server over TLS")
	fs.StringVar(&o.TLSCert, "xds-tls-cert", "", "GRPC_XDS_SOTW with TLS: client certificate file (PEM) for mTLS")
	fs.StringVar(&o.TLSKey, "xds-tls-key", "", "GRPC_XDS_SOTW with TLS: client key file (PEM) for mTLS")
	fs.StringVar(&o.TLSCA, "xds-tls-ca", "",
		"GRPC_XDS_SOTW with TLS: CA file (PEM) that verifies the xDS server (empty: the system's CAs)")
	fs.StringVar(&o.TLSServerName, "xds-tls-server-name", "",
		"GRPC_XDS_SOTW with TLS: name the xDS server's certificate must carry (empty: the host of --xds-server)")
	fs.DurationVar(&o.Backoff.Initial, "xds-backoff-initial", xds.DefaultBackoffInitial,
		"GRPC_XDS_SOTW: wait before reconnecting after the stream to the xDS server ended")
	fs.DurationVar(&o.Backoff.Max, "xds-backoff-max", xds.DefaultBackoffMax, "GRPC_XDS_SOTW: longest wait before reconnecting")
	fs.Float64Var(&o.Backoff.Factor, "xds-backoff-factor", xds.DefaultBackoffFactor,
		"GRPC_XDS_SOTW: factor applied to the reconnect wait at each retry, as in envoyproxy/ratelimit (at or below 1 the wait stays at the initial interval)")
	fs.BoolVar(&o.Backoff.Jitter, "xds-backoff-jitter", true,
		"GRPC_XDS_SOTW: draw each reconnect wait at random between the initial interval and its computed value")
	fs.DurationVar(&o.ConnectRetryInterval, "xds-connect-retry-interval", xds.DefaultConnectRetry,
		"GRPC_XDS_SOTW: wait, give or take half, before a new attempt when the xDS server cannot be reached")
	fs.IntVar(&o.MaxResponseBytes, "xds-max-response-bytes", 0,
		"GRPC_XDS_SOTW: largest response accepted from the xDS server, in bytes (0: gRPC's 4 MiB)")
}
func addTLSFlags(fs *flag.FlagSet, o *TLS) {
	fs.BoolVar(&o.Enabled, "grpc-tls", false,
		"serve gRPC over TLS with --grpc-tls-cert and --grpc-tls-key (files re-read when they change)")
	fs.StringVar(&o.Cert, "grpc-tls-cert", "", "gRPC TLS: PEM file of the server's certificate chain")
	fs.StringVar(&o.Key, "grpc-tls-key", "", "gRPC TLS: PEM file of the server's private key")
	fs.StringVar(&o.ClientCA, "grpc-tls-client-ca", "",
		"gRPC TLS: PEM file of the CA certificates that client certificates must chain to; when set, clients without a valid certificate are refused (mTLS)")
	fs.StringVar(&o.ClientSAN, "grpc-tls-client-san", "",
		"gRPC mTLS: a subject alternative name (DNS name, IP or URI) that client certificates must carry")
}
func addTracingFlags(fs *flag.FlagSet, o *tracing.Options) {
	fs.BoolVar(&o.Enabled, "tracing", false,
		"export OpenTelemetry spans of every decision over OTLP (endpoint and the rest from OTEL_EXPORTER_OTLP_*); Envoy's W3C traceparent or B3 headers are continued")
	fs.StringVar(&o.Service, "tracing-service-name", "RateLimit", "tracing: the resource's service.name")
	fs.StringVar(&o.Namespace, "tracing-service-namespace", "", "tracing: the resource's service.namespace")
	fs.StringVar(&o.InstanceID, "tracing-service-instance-id", "", "tracing: the resource's service.instance.id (empty: a random UUID)")
	fs.StringVar(&o.Protocol, "tracing-exporter-protocol", "http", "tracing: OTLP over http (protobuf) or grpc")
	fs.Float64Var(&o.Rate, "tracing-sampling-rate", 1,
		"tracing: share of traces sampled when the caller did not decide, 0 to 1; a caller's sampled flag is followed")
}
func addRefStatsFlags(fs *flag.FlagSet, o *refstats.Options) {
	fs.BoolVar(&o.UsePrometheus, "prometheus", false,
		"serve envoyproxy/ratelimit's metrics (ratelimit_service_*) and FastLimit's own on --prometheus-addr")
	fs.StringVar(&o.PromAddr, "prometheus-addr", ":9090", "listen address of --prometheus")
	fs.StringVar(&o.PromPath, "prometheus-path", "/metrics", "HTTP path of --prometheus")
	fs.StringVar(&o.MapperYAML, "prometheus-mapper-yaml", "",
		"statsd_exporter mapping file from envoyproxy/ratelimit's stat names to Prometheus series (default: its built-in mapping)")
	fs.BoolVar(&o.ResponseTimeMillis, "prometheus-response-time-as-milliseconds", false,
		"with the built-in mapping, ratelimit_service_response_time_seconds holds milliseconds (as before envoyproxy/ratelimit#1104), not seconds")
	fs.BoolVar(&o.UseStatsd, "statsd", false,
		"send envoyproxy/ratelimit's stats (counters) to --statsd-host:--statsd-port every --statsd-flush-interval")
	fs.BoolVar(&o.UseDogStatsd, "dogstatsd", false,
		"send envoyproxy/ratelimit's stats (counters) as DogStatsD over UDP to --statsd-host:--statsd-port")
	fs.StringVar(&o.StatsdHost, "statsd-host", "localhost", "statsd host of --statsd and --dogstatsd")
	fs.IntVar(&o.StatsdPort, "statsd-port", 8125, "statsd port of --statsd and --dogstatsd")
	fs.StringVar(&o.StatsdProtocol, "statsd-protocol", "tcp", "protocol of --statsd: tcp (as gostats) or udp")
	fs.DurationVar(&o.FlushInterval, "statsd-flush-interval", 10*time.Second, "how often --statsd and --dogstatsd send")
	fs.StringVar(&o.ExtraTags, "statsd-tags", "", "tags k1:v1,k2:v2 added to every statsd stat")
	fs.BoolVar(&o.DisableStats, "stats-off", false,
		"turn envoyproxy/ratelimit's stats off whatever --prometheus, --statsd and --dogstatsd say (fastlimit_* stay on the admin listener)")
	fs.StringVar(&o.Mogrifiers, "dogstatsd-mogrifiers", "",
		"DogStatsD mogrifiers NAME1,NAME2, each set by DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS")
}
func addHealthFlags(fs *flag.FlagSet, o *Health) {
	fs.BoolVar(&o.RequiresRedis, "health-requires-redis", false,
		"/healthcheck, /ready and gRPC health fail while Redis does not answer (default: they do not depend on Redis; --on-store-error answers)")
	fs.BoolVar(&o.RequiresRules, "health-requires-rules", false,
		"health fails until rules of at least one domain are loaded")
}
func addRedisFlags(fs *flag.FlagSet, o *Redis) {
	fs.StringVar(&o.Type, "redis-type", store.TypeSingle,
		"Redis deployment: single, cluster (--redis-url host:port,host:port,...) or sentinel (--redis-url MASTER_NAME,host:port,...); any case")
	fs.StringVar(&o.SocketType, "redis-socket-type", "",
		"single Redis: tcp, or unix with --redis-url a socket path (/run/redis.sock or unix:///run/redis.sock); empty: from --redis-url")
	fs.StringVar(&o.Username, "redis-username", "", "Redis ACL user (overrides the URL's)")
	fs.StringVar(&o.Password, "redis-password", "", "Redis password (overrides the URL's); never logged")
	fs.StringVar(&o.SentinelPassword, "redis-sentinel-password", "", "password of the sentinels themselves (their requirepass)")
	fs.BoolVar(&o.TLS, "redis-tls", false, "connect to Redis (and the sentinels) over TLS; a rediss:// URL implies it")
	fs.StringVar(&o.TLSCA, "redis-tls-ca", "", "PEM file of the CAs that sign Redis' certificates (default: the system's)")
	fs.StringVar(&o.TLSCert, "redis-tls-cert", "", "PEM client certificate, for servers with tls-auth-clients")
	fs.StringVar(&o.TLSKey, "redis-tls-key", "", "PEM key of --redis-tls-cert")
	fs.StringVar(&o.TLSServerName, "redis-tls-server-name", "", "name Redis' certificates must hold (default: the host dialled)")
	fs.BoolVar(&o.TLSSkipVerify, "redis-tls-skip-verify", false, "accept any Redis certificate (insecure)")
	fs.BoolVar(&o.TLSSkipHostnameVerification, "redis-tls-skip-hostname-verification", false,
		"verify Redis' certificate chain but not the name it is issued to (envoyproxy/ratelimit's setting)")
}
