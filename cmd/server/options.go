package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	config "github.com/fastlimit/fastlimit/pkg/rules"
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
	gather        time.Duration // REDIS_PIPELINE_WINDOW
	gatherOps     int           // REDIS_PIPELINE_LIMIT
	muxConns      int
	cacheBytes    int
	sweepEvery    time.Duration
	memoryMaxKeys int
	streamWorkers int
	breakerCool   time.Duration
	limits        limiter.Limits

	atomic bool // default for domains: decide a request's descriptors all or nothing
	merge  bool // merge the files of one domain (MERGE_DOMAIN_CONFIG)

	grpcMaxAge      time.Duration // GOAWAY connections older than this (0: never)
	grpcMaxAgeGrace time.Duration // then close them after this long

	redis   redisOptions  // Redis deployment: type, TLS, credentials
	headers headerOptions // response headers, metadata, global shadow and quota modes
	admin   adminOptions  // reload, metrics, admin surface
	xds     xdsOptions    // rules over xDS (--config-type=GRPC_XDS_SOTW)
	tls     tlsOptions    // gRPC TLS and mTLS
	tracing traceOptions  // OpenTelemetry spans over OTLP

	refStats refStatsOptions // envoyproxy/ratelimit's stats: Prometheus, statsd

	health healthOptions // what /healthcheck and /ready check

	// layout is how the rules are read and watched when envoyproxy/
	// ratelimit's RUNTIME_* variables give them (refenv.go); the zero
	// value reads --config flat.
	layout rulesLayout
	// src names how each setting given was given: "--flag", its env twin,
	// or the reference's variable it was mapped from. Errors about a
	// setting name it so.
	src map[string]string
	// refWarnings list the reference's variables set that FastLimit does
	// not honour, each with what it does instead; logged once at start.
	refWarnings []string
}

// rulesLayout says where the rules files are and how they are found.
type rulesLayout struct {
	dir  string         // what config.LoadWith reads
	load config.Options // how
	// watch configures the watcher of dir: a tree (Recursive), and the
	// root whose symlink swap reloads (RUNTIME_WATCH_ROOT).
	recursive bool
	root      string
}

// rules returns the rules layout in force: the reference's, or --config.
func (o *options) rules() rulesLayout {
	l := o.layout
	if l.dir == "" {
		l = rulesLayout{dir: o.configDir}
	}
	l.load.MergeDomains = o.merge
	return l
}

func newFlagSet(name string, o *options, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.configDir, "config", "config",
		"directory of rules files (YAML, one domain each); without it, envoyproxy/ratelimit's RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY give it, if set")
	fs.StringVar(&o.grpcAddr, "grpc-addr", ":8081", "gRPC listen address (Envoy's rate-limit service), or unix:PATH for a unix socket")
	fs.StringVar(&o.httpAddr, "http-addr", ":8080", "HTTP listen address (/healthcheck, /ready, /json)")
	fs.StringVar(&o.redisURL, "redis-url", "",
		"Redis: redis:// or rediss:// URL, host:port, or a unix socket's path; empty runs on the embedded in-memory store")
	fs.StringVar(&o.keyPrefix, "key-prefix", "ratelimit", "prefix of every store key")
	o.logLevel, o.logFormat = "info", "json"
	fs.Var(checked{&o.logLevel, parseLogLevel}, "log-level", "log level: trace (as debug), debug, info, warn, error, in any case")
	fs.Var(checked{&o.logFormat, parseLogFormat}, "log-format", "log format: json, text, or console (text in colour)")
	fs.DurationVar(&o.storeTimeout, "store-timeout", 50*time.Millisecond,
		"longest wait for the store on one request; keep it at or below Envoy's rate-limit filter timeout")
	fs.StringVar(&o.onStoreError, "on-store-error", policyError,
		"when the store fails: allow (answer OK), deny (answer OVER_LIMIT) or error (answer Unavailable; Envoy's failure_mode_deny decides)")
	fs.DurationVar(&o.gather, "redis-pipeline-window", time.Millisecond,
		"when many requests wait for Redis at once (a busy server), how long a script call waits for more before it is sent, so that Redis decides more per call (0: never); a lone caller, or a few, never wait")
	fs.IntVar(&o.gatherOps, "redis-pipeline-limit", 0,
		"a script call stops waiting (--redis-pipeline-window) once this many decisions wait (0: 255)")
	fs.IntVar(&o.batchSlots, "redis-batches", 2,
		"script calls in flight per Redis server (per cluster master); requests that arrive meanwhile share the next (0: one call per request)")
	fs.IntVar(&o.muxConns, "redis-conns", 0,
		"no longer used: every Redis is reached through go-redis' pool, with requests merged into script calls (--redis-batches); kept so that settings that give it still start, with a warning")
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
		"Redis read timeout (0: 3s): how long a script call may await its reply, whether or not its requests still wait (they wait at most --store-timeout)")
	fs.DurationVar(&o.writeTimeout, "redis-write-timeout", 0, "Redis socket write timeout (0: the read timeout)")
	fs.IntVar(&o.maxRecvBytes, "max-request-bytes", 4<<20, "largest gRPC request accepted, in bytes")
	fs.DurationVar(&o.drain, "drain", 5*time.Second,
		"on SIGTERM, how long /ready and gRPC health fail while the server still answers, so that load balancers stop sending first (0: stop at once)")
	fs.BoolVar(&o.atomic, "atomic", false,
		"decide every request's descriptors all or nothing (a domain's atomic: true does the same for that domain)")
	fs.BoolVar(&o.merge, "merge-domain-config", false,
		"merge rules files of the same domain (their top-level descriptors side by side) instead of refusing them")
	fs.DurationVar(&o.grpcMaxAge, "grpc-max-connection-age", 24*time.Hour,
		"send GOAWAY to gRPC connections older than this, so that clients spread over new replicas (0: never)")
	fs.DurationVar(&o.grpcMaxAgeGrace, "grpc-max-connection-age-grace", time.Hour,
		"after --grpc-max-connection-age, how long calls in flight may take before the connection is closed")
	addRedisFlags(fs, &o.redis)
	addHeaderFlags(fs, &o.headers)
	addAdminFlags(fs, &o.admin)
	addXDSFlags(fs, &o.xds)
	addTLSFlags(fs, &o.tls)
	addTracingFlags(fs, &o.tracing)
	addRefStatsFlags(fs, &o.refStats)
	addHealthFlags(fs, &o.health)
	return fs
}

// parseOptions reads flags, falling back to environment variables for the
// flags not given on the command line.
func parseOptions(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	_, err := parseFlags(fs, args, getenv)
	return err
}

// readOptions reads o from args and the environment: flags, then their
// environment twins, then envoyproxy/ratelimit's variables for the
// settings neither gave (refenv.go).
func readOptions(o *options, fs *flag.FlagSet, args []string, getenv func(string) string) error {
	src, err := parseFlags(fs, args, getenv)
	if err != nil {
		return err
	}
	o.src = src
	return applyRefEnv(o, fs, getenv)
}

// parseFlags parses args, then sets the flags not given from their
// environment twins. It returns how each flag set was given: "--name" or
// the variable's name. A positional argument is an error: the flag
// package would stop there and ignore every flag after it.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) (map[string]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: settings are flags (-h lists them); the only command is 'check'", fs.Arg(0))
	}
	src := map[string]string{}
	fs.Visit(func(f *flag.Flag) { src[f.Name] = "--" + f.Name })
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		if src[f.Name] != "" {
			return
		}
		env := envName(f.Name)
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %v", env, v, err))
				return
			}
			src[f.Name] = env
		}
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("environment: %s", strings.Join(errs, "; "))
	}
	return src, nil
}

// checked is a string flag whose Set normalises and checks the value, so
// that a bad value is reported by the flag or variable that gave it.
type checked struct {
	p     *string
	check func(string) (string, error)
}

func (c checked) String() string {
	if c.p == nil {
		return ""
	}
	return *c.p
}

func (c checked) Set(v string) error {
	n, err := c.check(v)
	if err != nil {
		return err
	}
	*c.p = n
	return nil
}

// parseLogLevel accepts zap's levels and the reference's (logrus') names
// in any case: trace logs as debug, warning as warn.
func parseLogLevel(v string) (string, error) {
	l := strings.ToLower(strings.TrimSpace(v))
	switch l {
	case "trace":
		l = "debug"
	case "warning":
		l = "warn"
	}
	if _, err := zapcore.ParseLevel(l); err != nil {
		return "", fmt.Errorf("%q is not trace, debug, info, warn, error, panic or fatal", v)
	}
	return l, nil
}

// Log formats of --log-format.
const (
	logJSON    = "json"
	logText    = "text"
	logConsole = "console"
)

func parseLogFormat(v string) (string, error) {
	f := strings.ToLower(strings.TrimSpace(v))
	switch f {
	case logJSON, logText, logConsole:
		return f, nil
	}
	return "", fmt.Errorf("%q is not json, text or console", v)
}

// settingError is a bad setting. It names the setting the way it was
// given (options.named): the flag, its env twin, or the reference's
// variable it came from.
type settingError struct {
	flag string // the flag's name
	as   string // how it was given; "--flag" when empty
	err  error
}

func (e *settingError) Error() string {
	as := e.as
	if as == "" {
		as = "--" + e.flag
	}
	return as + ": " + e.err.Error()
}

func (e *settingError) Unwrap() error { return e.err }

// badSetting is a settingError about flag.
func badSetting(flag, format string, args ...any) error {
	return &settingError{flag: flag, err: fmt.Errorf(format, args...)}
}

// name is how flag's setting was given: "--flag", its env twin or the
// reference's variable.
func (o *options) name(flag string) string {
	if n := o.src[flag]; n != "" {
		return n
	}
	return "--" + flag
}

// named makes a settingError in err name its setting as it was given.
func (o *options) named(err error) error {
	var se *settingError
	if errors.As(err, &se) && se.as == "" {
		se.as = o.name(se.flag)
	}
	return err
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
		return o.named(badSetting("on-store-error", "%q is not allow, deny or error", o.onStoreError))
	}
	if o.storeTimeout <= 0 {
		return o.named(badSetting("store-timeout", "must be positive"))
	}
	if o.keyPrefix == "" || strings.ContainsAny(o.keyPrefix, "{}") {
		return o.named(badSetting("key-prefix", "%q: the key prefix must be non-empty and free of '{' and '}' (they are Redis Cluster hash tags)", o.keyPrefix))
	}
	if o.grpcMaxAge < 0 || o.grpcMaxAgeGrace < 0 {
		return o.named(badSetting("grpc-max-connection-age", "must not be negative"))
	}
	if err := o.xds.validate(); err != nil {
		return err
	}
	if err := o.admin.validate(); err != nil {
		return o.named(err)
	}
	return o.named(o.headers.validate())
}
