package settings

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// envoyproxy/ratelimit's environment, as a compatibility layer: refVars
// lists every variable the reference reads (its src/settings/settings.go)
// and what FastLimit does with it. docs/migrating.md's table is generated
// from it (TestDocsTables).

// refHow is what FastLimit does with a reference variable.
type refHow int

const (
	// refTwin is a flag's: its env twin, or read after the twin where
	// FastLimit names the flag otherwise (refNames).
	refTwin refHow = iota
	// refMapped sets a flag, or the rules layout, that neither the
	// command line nor the flag's twin gave (refMappings).
	refMapped
	// refWarned is not honoured: set, it is named in the startup warning.
	refWarned
	// refRefused stops the start, unless its value asks for what
	// FastLimit does anyway.
	refRefused
)

// refVar is one variable of the reference.
type refVar struct {
	name string
	how  refHow
	flag string // refTwin, refMapped: the flag it is, or the flag it sets
	// note, in Markdown relative to docs/, is in the docs and in the
	// warning or error that names the variable.
	note string
	fine refOK // refWarned, refRefused: values that pass without a word
	// checked is the reference version the row was checked against:
	// refPin unless set.
	checked string
}

// Reference versions the rows were checked against.
const (
	// refPin is the version the test command installs and e2e compares
	// with (internal/testing/refserver.Version).
	refPin = "v1.4.1-0.20260122083618-3fb702589d36"
	// refMain is upstream main after the pin, where a variable appeared
	// later.
	refMain = "main f2fb157 (2026-07-05)"
	// Pull requests merged after refMain, where a variable appeared.
	refPR1168 = "envoyproxy/ratelimit#1168"
	refPR1191 = "envoyproxy/ratelimit#1191"
)

func (v refVar) checkedAgainst() string {
	if v.checked == "" {
		return refPin
	}
	return v.checked
}

// refOK accepts some values of a variable; the zero value accepts none.
type refOK struct {
	match func(string) bool
	doc   string // the values, for docs/migrating.md
	// except: doc names the values refused, not those accepted.
	except bool
}

var (
	okFalse = refOK{match: isFalse, doc: "false"}
	okTrue  = refOK{match: isTrue, doc: "true"}
	okZero  = refOK{match: isZero, doc: "0"}
)

// okFold accepts want in any case.
func okFold(want string) refOK {
	return refOK{match: func(v string) bool { return strings.EqualFold(v, want) }, doc: "`" + want + "`"}
}

// okNotIn accepts any value but those listed, in any case.
func okNotIn(refused ...string) refOK {
	return refOK{match: func(v string) bool {
		for _, r := range refused {
			if strings.EqualFold(v, r) {
				return false
			}
		}
		return true
	}, doc: "`" + strings.Join(refused, "` or `") + "` (in any case)", except: true}
}

// The reference's defaults that FastLimit applies when it maps a setting.
const (
	refRuntimeRoot = "/srv/runtime_data/current"
	refAppDir      = "config"
	refHTTPPort    = "8080"
	refGRPCPort    = "8081"
	refDebugPort   = "6070"
)

// Notes shared by families of variables.
const (
	notePerSecond = "ignored: FastLimit has no second Redis for per-second limits; they are counted on REDIS_URL with the others"
	noteMemcache  = "ignored: FastLimit has no memcache backend (the reference too ignores it unless BACKEND_TYPE=memcache, which FastLimit refuses)"
	// noteRedisStartup is about envoyproxy/ratelimit#1144's retries.
	noteRedisStartup = "ignored: FastLimit does not wait for Redis before serving; it listens at once, `/ready` waits for Redis' first answer, requests meanwhile get `--on-store-error`'s answer, and it never exits for want of Redis"
)

// refVars is the table, in the order of the reference's settings.go, then
// the variables it does not declare but its deployments set.
var refVars = []refVar{
	{name: "HOST", how: refMapped, flag: "http-addr", note: "with PORT, the HTTP address `HOST:PORT` (default: all interfaces)"},
	{name: "PORT", how: refMapped, flag: "http-addr", note: "with HOST, the HTTP address (default 8080)"},
	{name: "DEBUG_HOST", how: refMapped, flag: "admin-addr", note: "with DEBUG_PORT, the admin address; default 127.0.0.1, where the reference binds 0.0.0.0: bound beyond loopback, FastLimit's admin listener answers reads of identifiers only with authorization (docs/security.md)"},
	{name: "DEBUG_PORT", how: refMapped, flag: "admin-addr", note: "with DEBUG_HOST, the admin address (default 6070)"},
	{name: "GRPC_UDS", how: refMapped, flag: "grpc-addr", note: "gRPC on this unix socket instead of GRPC_HOST:GRPC_PORT (`--grpc-addr unix:PATH`)"},
	{name: "GRPC_HOST", how: refMapped, flag: "grpc-addr", note: "with GRPC_PORT, the gRPC address (default: all interfaces)"},
	{name: "GRPC_PORT", how: refMapped, flag: "grpc-addr", note: "with GRPC_HOST, the gRPC address (default 8081)"},
	{name: "GRPC_MAX_CONNECTION_AGE", how: refTwin, flag: "grpc-max-connection-age", note: "default 24h, as the reference's"},
	{name: "GRPC_MAX_CONNECTION_AGE_GRACE", how: refTwin, flag: "grpc-max-connection-age-grace", note: "default 1h, as the reference's"},
	{name: "GRPC_SERVER_USE_TLS", how: refTwin, flag: "grpc-tls", note: "gRPC TLS; certificates re-read when their files change (see [tls.md](tls.md))"},
	{name: "GRPC_SERVER_TLS_CERT", how: refTwin, flag: "grpc-tls-cert", note: "gRPC TLS; certificates re-read when their files change (see [tls.md](tls.md))"},
	{name: "GRPC_SERVER_TLS_KEY", how: refTwin, flag: "grpc-tls-key", note: "gRPC TLS; certificates re-read when their files change (see [tls.md](tls.md))"},
	{name: "GRPC_CLIENT_TLS_CACERT", how: refTwin, flag: "grpc-tls-client-ca", note: "gRPC TLS; certificates re-read when their files change (see [tls.md](tls.md))"},
	{name: "GRPC_CLIENT_TLS_SAN", how: refTwin, flag: "grpc-tls-client-san", note: "gRPC TLS; certificates re-read when their files change (see [tls.md](tls.md))"},
	{name: "LOG_LEVEL", how: refTwin, flag: "log-level", note: "any case; `trace` logs as debug, `warning` as warn. Default info (the reference's: warn)"},
	{name: "LOG_FORMAT", how: refTwin, flag: "log-format", note: "`json` or `text` (also `console`: text in colour). Default json (the reference's: text)"},
	{name: "CONFIG_TYPE", how: refTwin, flag: "config-type", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "FORCE_START_WITHOUT_INITIAL_CONFIG", how: refTwin, flag: "xds-start-without-rules", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "CONFIG_GRPC_XDS_NODE_ID", how: refTwin, flag: "xds-node-id", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "CONFIG_GRPC_XDS_NODE_METADATA", how: refTwin, flag: "xds-node-metadata", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "CONFIG_GRPC_XDS_SERVER_URL", how: refTwin, flag: "xds-server", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", how: refTwin, flag: "xds-connect-retry-interval", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", how: refTwin, flag: "xds-headers", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", how: refTwin, flag: "xds-tls", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", how: refTwin, flag: "xds-tls-cert", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", how: refTwin, flag: "xds-tls-key", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", how: refTwin, flag: "xds-tls-ca", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", how: refTwin, flag: "xds-tls-server-name", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", how: refTwin, flag: "xds-backoff-initial", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", how: refTwin, flag: "xds-backoff-max", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", how: refTwin, flag: "xds-backoff-factor", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "XDS_CLIENT_BACKOFF_JITTER", how: refTwin, flag: "xds-backoff-jitter", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", how: refTwin, flag: "xds-max-response-bytes", note: "rules over xDS (see [xds.md](xds.md))"},
	{name: "USE_DOG_STATSD", how: refTwin, flag: "dogstatsd", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "USE_DOG_STATSD_MOGRIFIERS", how: refTwin, flag: "dogstatsd-mogrifiers", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "USE_STATSD", how: refTwin, flag: "statsd", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "STATSD_HOST", how: refTwin, flag: "statsd-host", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "STATSD_PORT", how: refTwin, flag: "statsd-port", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "EXTRA_TAGS", how: refTwin, flag: "statsd-tags", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "STATS_FLUSH_INTERVAL", how: refTwin, flag: "statsd-flush-interval", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "DISABLE_STATS", how: refTwin, flag: "stats-off", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "USE_PROMETHEUS", how: refTwin, flag: "prometheus", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "PROMETHEUS_ADDR", how: refTwin, flag: "prometheus-addr", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "PROMETHEUS_PATH", how: refTwin, flag: "prometheus-path", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "PROMETHEUS_MAPPER_YAML", how: refTwin, flag: "prometheus-mapper-yaml", note: "the reference's metric names (see [metrics.md](metrics.md#the-references-names))"},
	{name: "RUNTIME_ROOT", how: refMapped, flag: "config", note: "the rules directory is `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY` (default root /srv/runtime_data/current), read as the reference reads it: every file, in subdirectories too"},
	{name: "RUNTIME_SUBDIRECTORY", how: refMapped, flag: "config", note: "see RUNTIME_ROOT"},
	{name: "RUNTIME_APPDIRECTORY", how: refMapped, flag: "config", note: "see RUNTIME_ROOT (default `config`)"},
	{name: "RUNTIME_IGNOREDOTFILES", how: refMapped, flag: "config", note: "true skips files and directories whose names start with a dot (default false: loaded, as by the reference); a ConfigMap's `..` entries are never loaded"},
	{name: "RUNTIME_WATCH_ROOT", how: refMapped, flag: "config", note: "true (the default): files whose path under `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY`, `/` read as `.`, starts with `$RUNTIME_APPDIRECTORY.` (the reference's rule), and a swap of the RUNTIME_ROOT symlink reloads; false: the app directory's tree. Either way any change in the tree reloads"},
	{name: "EXPIRATION_JITTER_MAX_SECONDS", how: refWarned, note: "ignored: keys expire when their window ends, without jitter", fine: okZero},
	{name: "LOCAL_CACHE_SIZE_IN_BYTES", how: refTwin, flag: "over-limit-cache-bytes", note: "a local cache of keys over their limit, counted as 256 bytes a key"},
	{name: "NEAR_LIMIT_RATIO", how: refTwin, flag: "near-limit-ratio", note: "in (0, 1]"},
	{name: "CACHE_KEY_PREFIX", how: refMapped, flag: "key-prefix", note: "the prefix of every Redis key, a trailing `:` dropped (FastLimit puts one after the prefix); keys differ from the reference's anyway"},
	{name: "BACKEND_TYPE", how: refRefused, note: "only `redis` (Redis at REDIS_URL, or the embedded store without it): FastLimit has no memcache backend", fine: okFold("redis")},
	{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", how: refMapped, flag: "atomic", note: "true sets `--atomic`: a request over any of its limits charges none of them (the reference still charges the limit that is over); its refunds (`is_negative_hits`) land whatever it answers, as upstream applies them since #1140"},
	{name: "LIMIT_RESPONSE_HEADERS_ENABLED", how: refMapped, flag: "response-headers", note: "true sets `--response-headers legacy`"},
	{name: "LIMIT_LIMIT_HEADER", how: refTwin, flag: "limit-limit-header"},
	{name: "LIMIT_REMAINING_HEADER", how: refTwin, flag: "limit-remaining-header"},
	{name: "LIMIT_RESET_HEADER", how: refTwin, flag: "limit-reset-header"},
	{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", how: refTwin, flag: "health-requires-rules", note: "health fails until rules of at least one domain are loaded"},
	{name: "REDIS_SOCKET_TYPE", how: refTwin, flag: "redis-socket-type", note: "`tcp` or `unix`; default: from REDIS_URL (a path is a unix socket)"},
	{name: "REDIS_TYPE", how: refTwin, flag: "redis-type", note: "`single`, `cluster`, `sentinel`, in any case"},
	{name: "REDIS_URL", how: refTwin, flag: "redis-url", note: "`host:port`, `redis://`, `rediss://`, a socket path; unset: the embedded store"},
	{name: "REDIS_POOL_SIZE", how: refTwin, flag: "redis-pool-size", note: "connections per Redis server; script calls in flight on them are bounded by `--redis-batches`"},
	{name: "REDIS_AUTH", how: refTwin, flag: "redis-auth", note: "password or user:password, used when `--redis-password` is empty; FastLimit's own settings are `--redis-password` and `--redis-username` (`--redis-auth` is deprecated)"},
	{name: "REDIS_TLS", how: refTwin, flag: "redis-tls"},
	{name: "REDIS_TLS_CLIENT_CERT", how: refTwin, flag: "redis-tls-cert"},
	{name: "REDIS_TLS_CLIENT_KEY", how: refTwin, flag: "redis-tls-key"},
	{name: "REDIS_TLS_CACERT", how: refTwin, flag: "redis-tls-ca"},
	{name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", how: refTwin, flag: "redis-tls-skip-hostname-verification"},
	{name: "REDIS_PIPELINE_WINDOW", how: refTwin, flag: "redis-pipeline-window", note: "the longest a request waits for company before its script call is sent, where requests arrive fast enough to expect some; FastLimit's default is 1ms (the reference's 0)"},
	{name: "REDIS_PIPELINE_LIMIT", how: refTwin, flag: "redis-pipeline-limit", note: "a script call stops waiting once this many decisions wait"},
	{name: "REDIS_PERSECOND", how: refWarned, note: notePerSecond, fine: okFalse},
	{name: "REDIS_PERSECOND_SOCKET_TYPE", how: refWarned, note: notePerSecond},
	{name: "REDIS_PERSECOND_TYPE", how: refWarned, note: notePerSecond},
	{name: "REDIS_PERSECOND_URL", how: refWarned, note: notePerSecond},
	{name: "REDIS_PERSECOND_POOL_SIZE", how: refWarned, note: notePerSecond},
	{name: "REDIS_PERSECOND_AUTH", how: refWarned, note: notePerSecond},
	{name: "REDIS_PERSECOND_TLS", how: refWarned, note: notePerSecond},
	{name: "REDIS_SENTINEL_AUTH", how: refMapped, flag: "redis-sentinel-password", note: "the sentinels' own password"},
	{name: "REDIS_PERSECOND_SENTINEL_AUTH", how: refWarned, note: notePerSecond},
	{name: "REDIS_PERSECOND_PIPELINE_WINDOW", how: refWarned, note: notePerSecond},
	{name: "REDIS_PERSECOND_PIPELINE_LIMIT", how: refWarned, note: notePerSecond},
	{name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", how: refTwin, flag: "health-requires-redis", note: "true: /healthcheck, /ready and gRPC health fail while Redis does not answer"},
	{name: "REDIS_TIMEOUT", how: refMapped, flag: "redis-dial-timeout", note: "sets `--redis-dial-timeout`, `--redis-read-timeout` and `--redis-write-timeout`; a request still waits at most `--store-timeout`"},
	{name: "REDIS_PERSECOND_TIMEOUT", how: refWarned, note: notePerSecond},
	{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", how: refRefused, note: "CREATE and ERROR are refused, as by the reference; a request waits for Redis at most `--store-timeout`", fine: okNotIn("CREATE", "ERROR")},
	{name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", how: refWarned, note: notePerSecond},
	{name: "MEMCACHE_HOST_PORT", how: refWarned, note: noteMemcache},
	{name: "MEMCACHE_MAX_IDLE_CONNS", how: refWarned, note: noteMemcache},
	{name: "MEMCACHE_SRV", how: refWarned, note: noteMemcache},
	{name: "MEMCACHE_SRV_REFRESH", how: refWarned, note: noteMemcache},
	{name: "MEMCACHE_TLS", how: refWarned, note: noteMemcache, fine: okFalse},
	{name: "MEMCACHE_TLS_CLIENT_CERT", how: refWarned, note: noteMemcache},
	{name: "MEMCACHE_TLS_CLIENT_KEY", how: refWarned, note: noteMemcache},
	{name: "MEMCACHE_TLS_CACERT", how: refWarned, note: noteMemcache},
	{name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", how: refWarned, note: noteMemcache, fine: okFalse},
	{name: "SHADOW_MODE", how: refTwin, flag: "shadow-mode"},
	{name: "QUOTA_MODE", how: refTwin, flag: "quota-mode", checked: refMain,
		note: "every descriptor with a limit is in quota mode: the request is OVER_LIMIT only when all of them are over (envoyproxy/ratelimit#1059); over ones keep their OVER_LIMIT status, and their metadata is left out of the dynamic metadata"},
	{name: "RESPONSE_DYNAMIC_METADATA", how: refTwin, flag: "response-dynamic-metadata", checked: refMain,
		note: "main's shape (envoyproxy/ratelimit#1112): every descriptor, the merged `metadata` of those that passed, no `quotaModeEnabled`/`quotaModeViolations`; FastLimit adds `fastlimit.overLimit` (see [envoy.md](envoy.md#dynamic-metadata))"},
	{name: "MERGE_DOMAIN_CONFIG", how: refTwin, flag: "merge-domain-config", note: "files of one domain add their top-level descriptors to it; a descriptor repeated across them is an error"},
	{name: "TRACING_ENABLED", how: refTwin, flag: "tracing", note: "OpenTelemetry spans over OTLP (see [tracing.md](tracing.md))"},
	{name: "TRACING_SERVICE_NAME", how: refTwin, flag: "tracing-service-name", note: "OpenTelemetry spans over OTLP (see [tracing.md](tracing.md))"},
	{name: "TRACING_SERVICE_NAMESPACE", how: refTwin, flag: "tracing-service-namespace", note: "OpenTelemetry spans over OTLP (see [tracing.md](tracing.md))"},
	{name: "TRACING_SERVICE_INSTANCE_ID", how: refTwin, flag: "tracing-service-instance-id", note: "OpenTelemetry spans over OTLP (see [tracing.md](tracing.md))"},
	{name: "TRACING_EXPORTER_PROTOCOL", how: refTwin, flag: "tracing-exporter-protocol", note: "OpenTelemetry spans over OTLP (see [tracing.md](tracing.md))"},
	{name: "TRACING_SAMPLING_RATE", how: refTwin, flag: "tracing-sampling-rate", note: "OpenTelemetry spans over OTLP (see [tracing.md](tracing.md))"},
	// Added to settings.go after the pin.
	{name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", how: refTwin, flag: "prometheus-response-time-as-milliseconds", checked: refMain,
		note: "with the built-in mapping, `ratelimit_service_response_time_seconds` holds seconds unless true (milliseconds, as before envoyproxy/ratelimit#1104); ignored with PROMETHEUS_MAPPER_YAML, whose `scale` decides"},
	{name: "REDIS_STARTUP_INITIAL_INTERVAL", how: refWarned, checked: refMain, note: noteRedisStartup},
	{name: "REDIS_STARTUP_MAX_INTERVAL", how: refWarned, checked: refMain, note: noteRedisStartup},
	{name: "REDIS_STARTUP_MAX_ELAPSED_TIME", how: refWarned, checked: refMain, note: noteRedisStartup, fine: okZero},
	{name: "REDIS_CLUSTER_PIPELINE_PARALLELISM", how: refRefused, checked: refMain, fine: refOK{match: isNonNegativeInt, doc: "a number >= 0"},
		note: "FastLimit sends a cluster's script calls to all its masters at once, whatever the value; a negative one is refused, as by the reference"},
	{name: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", how: refWarned, checked: refMain, note: notePerSecond},
	{name: "LIMIT_REQUEST_HEADERS_ENABLED", how: refTwin, flag: "request-headers", checked: refPR1168,
		note: "true adds LIMIT_REQUEST_LIMIT_HEADER, LIMIT_REQUEST_REMAINING_HEADER and LIMIT_REQUEST_RESET_HEADER, of the descriptor the response headers would describe, to the request Envoy forwards upstream (`request_headers_to_add`), on every answer with a limit, whether or not the response headers are on (see [envoy.md](envoy.md#response-headers))"},
	{name: "LIMIT_REQUEST_LIMIT_HEADER", how: refTwin, flag: "limit-request-limit-header", checked: refPR1168, note: "default `RateLimit-Limit`"},
	{name: "LIMIT_REQUEST_REMAINING_HEADER", how: refTwin, flag: "limit-request-remaining-header", checked: refPR1168, note: "default `RateLimit-Remaining`"},
	{name: "LIMIT_REQUEST_RESET_HEADER", how: refTwin, flag: "limit-request-reset-header", checked: refPR1168, note: "default `RateLimit-Reset`"},
	{name: "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR", how: refWarned, fine: okTrue, checked: refPR1191,
		note: "FastLimit always does what true asks: a connection that answers READONLY (a master demoted behind an address that now leads to the new one) is closed, and the next call dials again through REDIS_URL; false cannot keep it (see [redis.md](redis.md#when-redis-fails))"},
	// Not in settings.go, but set by deployments of the reference.
	{name: "GRPC_SERVER_TLS_CA_CERT", how: refWarned, note: "ignored, as by the reference (Envoy Gateway sets it): client certificates are asked for only with GRPC_CLIENT_TLS_CACERT"},
}

// isFalse accepts a boolean false.
func isFalse(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && !b
}

// isTrue accepts a boolean true.
func isTrue(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// isNonNegativeInt accepts an integer >= 0.
func isNonNegativeInt(v string) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n >= 0
}

// isZero accepts a zero number or duration.
func isZero(v string) bool {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return f == 0
	}
	d, err := time.ParseDuration(v)
	return err == nil && d == 0
}

// refNames maps a flag to the reference's variable for it, where that is
// not the flag's env twin.
var refNames = func() map[string]string {
	m := map[string]string{}
	for _, v := range refVars {
		if v.how == refTwin && EnvName(v.flag) != v.name {
			m[v.flag] = v.name
		}
	}
	return m
}()

// isRefVar reports whether name is one of the reference's variables.
func isRefVar(name string) bool {
	return slices.ContainsFunc(refVars, func(v refVar) bool { return v.name == name })
}
