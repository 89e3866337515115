package main

import (
	"flag"
	"fmt"
	"io"

	"strings"
	"time"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// options are the server's settings. Every flag has an environment twin:
// the flag's name in upper case with '-' as '_' (--redis-url, REDIS_URL).
// A flag given on the command line wins over its environment variable.
type options struct {
	configDir     string
	grpcAddr      string
	httpAddr      string
	redisURL      string
	keyPrefix     string
	logLevel      string
	logFormat     string
	storeTimeout  time.Duration
	poolSize      int
	dialTimeout   time.Duration
	readTimeout   time.Duration
	writeTimeout  time.Duration
	maxRecvBytes  int
	drain         time.Duration
	onStoreError  string
	breakerFails  int
	batchSlots    int
	muxConns      int
	cacheBytes    int
	sweepEvery    time.Duration
	memoryMaxKeys int
	streamWorkers int
	breakerCool   time.Duration
	limits        limiter.Limits

	atomic bool // default for domains: decide a request's descriptors all or nothing

	redis   redisOptions  // Redis deployment: type, TLS, credentials
	headers headerOptions // response headers, metadata, global shadow mode
	admin   adminOptions  // reload, metrics, admin surface
	xds     xdsOptions    // rules over xDS (--config-type=GRPC_XDS_SOTW)
	tls     tlsOptions    // gRPC TLS and mTLS
	tracing traceOptions  // OpenTelemetry spans over OTLP

	refStats refStatsOptions // envoyproxy/ratelimit's stats: Prometheus, statsd
}

func newFlagSet(name string, o *options, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.configDir, "config", "config", "directory of rules files (YAML, one domain each)")
	fs.StringVar(&o.grpcAddr, "grpc-addr", ":8081", "gRPC listen address (Envoy's rate-limit service)")
	fs.StringVar(&o.httpAddr, "http-addr", ":8080", "HTTP listen address (/healthcheck, /ready, /json)")
	fs.StringVar(&o.redisURL, "redis-url", "", "Redis URL (redis:// or rediss://); empty runs on the embedded in-memory store")
	fs.StringVar(&o.keyPrefix, "key-prefix", "ratelimit", "prefix of every store key")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "json", "log format: json or console")
	fs.DurationVar(&o.storeTimeout, "store-timeout", 50*time.Millisecond,
		"longest wait for the store on one request; keep it at or below Envoy's rate-limit filter timeout")
	fs.StringVar(&o.onStoreError, "on-store-error", policyError,
		"when the store fails: allow (answer OK), deny (answer OVER_LIMIT) or error (answer Unavailable; Envoy's failure_mode_deny decides)")
	fs.IntVar(&o.batchSlots, "redis-batches", 2,
		"merge concurrent requests into shared Redis pipelines, with at most this many in flight (0: one pipeline per request)")
	fs.IntVar(&o.muxConns, "redis-conns", 2,
		"single Redis: connections that all requests share, pipelined (0: go-redis' pool with --redis-pool-size and --redis-batches instead)")
	fs.IntVar(&o.cacheBytes, "local-cache-size-in-bytes", 0,
		"Redis: memory for a local cache of keys found over their limit, denied without a Redis round trip until Redis said they could pass (0: off; counted as 256 bytes a key)")
	fs.DurationVar(&o.sweepEvery, "memory-sweep-interval", time.Minute,
		"embedded store: how often expired windows and buckets are swept from memory")
	fs.IntVar(&o.memoryMaxKeys, "memory-max-keys", 1_000_000,
		"embedded store: most windows and buckets held (about 150 bytes each); when full, a request that needs a new one fails as a store error and --on-store-error answers it (0: no bound)")
	fs.IntVar(&o.streamWorkers, "grpc-stream-workers", 0, "gRPC server goroutines that serve calls (0: one new goroutine per call)")
	fs.IntVar(&o.breakerFails, "breaker-failures", 5,
		"independent store failures in a row that open the circuit breaker; calls that fail together (one connection reset, one stall) count once, a success resets the count")
	fs.DurationVar(&o.breakerCool, "breaker-cooldown", 500*time.Millisecond,
		"while the circuit is open (requests answered at once), how often it pings the store in the background; the first answer closes it")
	fs.IntVar(&o.limits.MaxDescriptors, "max-descriptors", limiter.DefaultLimits.MaxDescriptors, "most descriptors in one request")
	fs.IntVar(&o.limits.MaxEntries, "max-entries", limiter.DefaultLimits.MaxEntries, "most entries in one descriptor")
	fs.IntVar(&o.limits.MaxKeyBytes, "max-entry-bytes", limiter.DefaultLimits.MaxKeyBytes, "longest descriptor entry key or value, in bytes")
	fs.IntVar(&o.poolSize, "redis-pool-size", 0, "Redis connections per server (0: 10 per CPU)")
	fs.DurationVar(&o.dialTimeout, "redis-dial-timeout", 0,
		"Redis connect timeout: dial, TLS and AUTH/SELECT, done in the background; requests wait for it no longer than --store-timeout (0: the URL's dial_timeout, else 1s)")
	fs.DurationVar(&o.readTimeout, "redis-read-timeout", 0,
		"Redis read timeout (0: 3s): go-redis' socket timeout, or with --redis-conns how long a connection may await a reply before it is redialled; a request's wait is bounded by --store-timeout anyway")
	fs.DurationVar(&o.writeTimeout, "redis-write-timeout", 0, "Redis socket write timeout (0: the read timeout)")
	fs.IntVar(&o.maxRecvBytes, "max-request-bytes", 4<<20, "largest gRPC request accepted, in bytes")
	fs.DurationVar(&o.drain, "drain", 5*time.Second,
		"on SIGTERM, how long /ready and gRPC health fail while the server still answers, so that load balancers stop sending first (0: stop at once)")
	fs.BoolVar(&o.atomic, "atomic", false,
		"decide every request's descriptors all or nothing (a domain's atomic: true does the same for that domain)")
	addRedisFlags(fs, &o.redis)
	addHeaderFlags(fs, &o.headers)
	addAdminFlags(fs, &o.admin)
	addXDSFlags(fs, &o.xds)
	addTLSFlags(fs, &o.tls)
	addTracingFlags(fs, &o.tracing)
	addRefStatsFlags(fs, &o.refStats)
	return fs
}

// parseOptions reads flags, falling back to environment variables for the
// flags not given on the command line.
func parseOptions(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		env := envName(f.Name)
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %v", env, v, err))
			}
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("environment: %s", strings.Join(errs, "; "))
	}
	return nil
}

func envName(flagName string) string {
	return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Failure policies of --on-store-error.
const (
	policyAllow = "allow"
	policyDeny  = "deny"
	policyError = "error"
)

func (o *options) validate() error {
	switch o.onStoreError {
	case policyAllow, policyDeny, policyError:
	default:
		return fmt.Errorf("--on-store-error: %q is not allow, deny or error", o.onStoreError)
	}
	if o.storeTimeout <= 0 {
		return fmt.Errorf("--store-timeout must be positive")
	}
	if o.keyPrefix == "" || strings.ContainsAny(o.keyPrefix, "{}") {
		return fmt.Errorf("--key-prefix must be non-empty and free of '{' and '}' (they are Redis Cluster hash tags)")
	}
	if err := o.xds.validate(); err != nil {
		return err
	}
	return o.headers.validate()
}
