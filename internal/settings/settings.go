// Package settings reads FastLimit's settings into one validated Settings
// value: command-line flags, their environment twins (the flag's name in
// upper case with '_' for '-') and, for what neither gives,
// envoyproxy/ratelimit's environment variables (refenv.go). The tables of
// settings in docs/ are generated from the same flag set (docs.go).
package settings

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/internal/observe/logging"
	"github.com/fastlimit/fastlimit/internal/observe/refstats"
	"github.com/fastlimit/fastlimit/internal/observe/tracing"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rls"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// Settings are the server's settings. Every flag has an environment twin:
// the flag's name in upper case with '-' as '_' (--redis-url, REDIS_URL).
// A flag given on the command line wins over its environment variable.
type Settings struct {
	ConfigDir     string
	GRPCAddr      string
	HTTPAddr      string
	RedisURL      string
	KeyPrefix     string
	LogLevel      string // a zap level: debug, info, warn, error, ...
	LogFormat     string // LogJSON, LogText or LogConsole
	StoreTimeout  time.Duration
	PoolSize      int
	DialTimeout   time.Duration
	ReadTimeout   time.Duration
	WriteTimeout  time.Duration
	MaxRecvBytes  int
	Drain         time.Duration
	OnStoreError  string // allow, deny or error (limiter.ParseFailurePolicy)
	BreakerFails  int
	BreakerCool   time.Duration
	Batches       int           // --redis-batches
	Gather        time.Duration // REDIS_PIPELINE_WINDOW
	GatherOps     int           // REDIS_PIPELINE_LIMIT
	MuxConns      int           // --redis-conns, no longer used
	CacheBytes    int           // LOCAL_CACHE_SIZE_IN_BYTES
	SweepEvery    time.Duration
	MemoryMaxKeys int
	StreamWorkers int
	Limits        limiter.Limits

	Atomic bool // default for domains: decide a request's descriptors all or nothing
	// QuotaMode is global quota mode (QUOTA_MODE): the limiter's.
	QuotaMode bool
	Merge     bool // merge the files of one domain (MERGE_DOMAIN_CONFIG)

	GRPCMaxAge      time.Duration // GOAWAY connections older than this (0: never)
	GRPCMaxAgeGrace time.Duration // then close them after this long
	GRPC            GRPCBounds    // what gRPC clients can open and hold

	RulesMaxFile, RulesMaxTotal int64 // rules size limits in bytes (0: none)

	Redis    Redis             // Redis deployment: type, TLS, credentials
	Headers  rls.HeaderOptions // response headers, metadata, global shadow mode
	Admin    Admin             // metrics, admin surface
	XDS      XDS               // rules over xDS (--config-type=GRPC_XDS_SOTW)
	TLS      TLS               // gRPC TLS and mTLS
	Tracing  tracing.Options   // OpenTelemetry spans over OTLP
	RefStats refstats.Options  // envoyproxy/ratelimit's stats: Prometheus, statsd
	Health   Health            // what /healthcheck and /ready check
	RLQS     RLQS              // Envoy's Rate Limit Quota Service

	// layout is how the rules are read and watched when envoyproxy/
	// ratelimit's RUNTIME_* variables give them (refenv.go); the zero
	// value reads ConfigDir flat.
	layout RulesLayout
	// src names how each setting given was given: "--flag", its env twin,
	// or the reference's variable it was mapped from. Errors about a
	// setting name it so.
	src map[string]string
	// warnings list the reference's variables set that FastLimit does
	// not honour, each with what it does instead.
	warnings []string
	// notes say what FastLimit chose for the reference's variables left
	// unset (REDIS_URL, USE_STATSD), where it follows the reference.
	notes []string
}

// GRPCBounds bound what gRPC clients can open and hold (internal/server's
// grpcBounds).
type GRPCBounds struct {
	// MaxConns bounds the open connections; the open-files limit lowers
	// it (connlimit.Budget). 0: the open-files limit alone.
	MaxConns int
	// MaxStreams bounds the calls in flight on one connection.
	MaxStreams int
	// RequestTimeout bounds a unary call from its headers to its end, its
	// request's arrival included (0: none).
	RequestTimeout time.Duration
	// MaxIdle closes a connection without calls for this long (0: never).
	MaxIdle time.Duration
	// PingMinTime is the shortest interval between a client's keepalive
	// pings; a client that pings more often is disconnected.
	PingMinTime time.Duration
}

// Admin configures metrics and the admin listener.
type Admin struct {
	Addr      string  // admin listener; empty or "off": none
	Pprof     bool    // serve /debug/pprof/ on the admin listener
	NearRatio float64 // share of a limit past which hits are near it
	// MaxDetailed bounds the rule series labelled with request values.
	MaxDetailed int
}

// Off reports whether the admin listener is turned off.
func (a *Admin) Off() bool { return a.Addr == "" || strings.EqualFold(a.Addr, "off") }

// Health says what the health endpoints check besides the rules.
type Health struct {
	// ActiveConn makes health depend on the store answering, as the
	// reference's REDIS_HEALTH_CHECK_ACTIVE_CONNECTION does.
	ActiveConn bool
	// OneConfig wants rules of at least one domain before health is OK.
	OneConfig bool
}

// TLS secures the gRPC listener.
type TLS struct {
	Enabled   bool
	Cert, Key string
	ClientCA  string // require and verify client certificates against it
	ClientSAN string // a SAN that client certificates must carry
}

// RulesLayout says where the rules files are and how they are found.
type RulesLayout struct {
	Dir  string        // what rules.LoadWith reads
	Load rules.Options // how
	// Recursive watches Dir as a tree; Root is the directory whose
	// symlink swap reloads (RUNTIME_WATCH_ROOT).
	Recursive bool
	Root      string
}

// Rules returns the rules layout in force: the reference's, or --config.
func (s *Settings) Rules() RulesLayout {
	l := s.layout
	if l.Dir == "" {
		l = RulesLayout{Dir: s.ConfigDir}
	}
	l.Load.MergeDomains = s.Merge
	l.Load.MaxFileBytes, l.Load.MaxTotalBytes = noLimit(s.RulesMaxFile), noLimit(s.RulesMaxTotal)
	return l
}

// noLimit maps a size flag to rules.Options: the flag's 0 (no limit) is
// rules' negative.
func noLimit(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// RefWarningMsg opens the startup warning that lists Warnings.
const RefWarningMsg = "envoyproxy/ratelimit settings that FastLimit does not honour"

// Warnings are the reference's variables set that FastLimit does not
// honour, each with what it does instead: log them once at start.
func (s *Settings) Warnings() []string { return s.warnings }

// Notes say what FastLimit chose, as the reference would, for the
// reference's variables left unset: log each once at start, at info.
func (s *Settings) Notes() []string { return s.notes }

// Parse reads settings from args and the environment: flags, then their
// environment twins, then envoyproxy/ratelimit's variables for the
// settings neither gave. name names the flag set in usage, written to
// out with -h (then Parse returns flag.ErrHelp). Parse does not validate
// the whole: Validate does.
func Parse(name string, args []string, getenv func(string) string, out io.Writer) (*Settings, error) {
	s := &Settings{}
	fs := newFlagSet(name, s, out)
	src, err := parseFlags(fs, args, getenv)
	if err != nil {
		return nil, err
	}
	s.src = src
	s.RefStats.Getenv = getenv
	if err := applyRefEnv(s, fs, getenv); err != nil {
		return nil, err
	}
	return s, nil
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
		env := EnvName(f.Name)
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

// EnvName is the environment twin of a flag.
func EnvName(flagName string) string {
	return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
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
// in any case (logging.ParseLevel): trace logs as debug, warning as warn.
func parseLogLevel(v string) (string, error) {
	l, err := logging.ParseLevel(v)
	if err != nil {
		return "", err
	}
	return l.String(), nil
}

// Log formats of --log-format.
const (
	LogJSON    = string(logging.JSON)
	LogText    = string(logging.Text)
	LogConsole = string(logging.Console)
)

func parseLogFormat(v string) (string, error) {
	f, err := logging.ParseFormat(v)
	return string(f), err
}

// Error is a bad setting. It names the setting the way it was given
// (Settings.Named): the flag, its env twin, or the reference's variable
// it came from.
type Error struct {
	Flag string // the flag's name
	As   string // how it was given; "--flag" when empty
	Err  error
}

func (e *Error) Error() string {
	as := e.As
	if as == "" {
		as = "--" + e.Flag
	}
	return as + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Bad is an *Error about flag.
func Bad(flag, format string, args ...any) error {
	return &Error{Flag: flag, Err: fmt.Errorf(format, args...)}
}

// Name is how flag's setting was given: "--flag", its env twin or the
// reference's variable.
func (s *Settings) Name(flag string) string {
	if n := s.src[flag]; n != "" {
		return n
	}
	return "--" + flag
}

// Given reports how flag's setting was given, "" when it was not.
func (s *Settings) Given(flag string) string { return s.src[flag] }

// Named makes an *Error in err name its setting as it was given.
func (s *Settings) Named(err error) error {
	var se *Error
	if errors.As(err, &se) && se.As == "" {
		se.As = s.Name(se.Flag)
	}
	return err
}

// Validate checks the settings as a whole; errors name the setting as it
// was given.
func (s *Settings) Validate() error {
	if _, err := limiter.ParseFailurePolicy(s.OnStoreError); err != nil {
		return s.Named(Bad("on-store-error", "%w", err))
	}
	if s.StoreTimeout <= 0 {
		return s.Named(Bad("store-timeout", "must be positive"))
	}
	if s.KeyPrefix == "" || strings.ContainsAny(s.KeyPrefix, "{}") {
		return s.Named(Bad("key-prefix", "%q: the key prefix must be non-empty and free of '{' and '}' (they are Redis Cluster hash tags)", s.KeyPrefix))
	}
	if s.GRPCMaxAge < 0 || s.GRPCMaxAgeGrace < 0 {
		return s.Named(Bad("grpc-max-connection-age", "must not be negative"))
	}
	if err := s.validateBounds(); err != nil {
		return err
	}
	if err := s.XDS.validate(); err != nil {
		return err
	}
	if !(s.Admin.NearRatio > 0 && s.Admin.NearRatio <= 1) {
		return s.Named(Bad("near-limit-ratio", "%v is not in (0, 1]", s.Admin.NearRatio))
	}
	if s.Admin.MaxDetailed < 0 {
		return s.Named(Bad("max-detailed-metric-series", "%d is negative", s.Admin.MaxDetailed))
	}
	if err := s.Headers.Validate(); err != nil {
		return s.Named(&Error{Flag: "response-headers", Err: err})
	}
	if err := s.Tracing.Validate(); err != nil {
		return err
	}
	if err := s.RLQS.validate(s); err != nil {
		return err
	}
	return s.Redis.validate(s.RedisURL)
}

// validateBounds checks the gRPC bounds and the rules size limits.
func (s *Settings) validateBounds() error {
	for _, c := range []struct {
		flag string
		bad  bool
	}{
		{"grpc-max-connections", s.GRPC.MaxConns < 0},
		{"grpc-max-concurrent-streams", s.GRPC.MaxStreams < 1},
		{"grpc-request-timeout", s.GRPC.RequestTimeout < 0},
		{"grpc-max-connection-idle", s.GRPC.MaxIdle < 0},
		{"grpc-keepalive-min-time", s.GRPC.PingMinTime < 0},
		{"rules-max-file-bytes", s.RulesMaxFile < 0},
		{"rules-max-total-bytes", s.RulesMaxTotal < 0},
	} {
		if c.bad {
			return s.Named(Bad(c.flag, "out of range"))
		}
	}
	return nil
}
