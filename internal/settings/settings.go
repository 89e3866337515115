// Package settings reads FastLimit's flags, their environment twins and
// envoyproxy/ratelimit's variables into one Settings, and generates the
// tables of them in docs/.
package settings

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/internal/guard/breaker"
	"github.com/fastlimit/fastlimit/internal/guard/overlimit"
	"github.com/fastlimit/fastlimit/internal/observe/logging"
	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/observe/refstats"
	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/internal/observe/tracing"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rls"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// Settings are the server's settings. Each flag sets a field named after
// it, of Settings or of the Options of the package it configures, which
// Settings holds; where a package needs more than its flags say, a
// method returns its Options (Redis.ClientOptions, XDS.ClientOptions,
// RLQS.Options). internal/server passes them on.
type Settings struct {
	Config       string // --config
	GRPCAddr     string
	HTTPAddr     string
	KeyPrefix    string
	LogLevel     string // a zap level: debug, info, warn, error, ...
	LogFormat    string // LogJSON, LogText or LogConsole
	StoreTimeout time.Duration
	OnStoreError string // allow, deny or error (limiter.ParseFailurePolicy)
	Drain        time.Duration

	GRPCMaxConnectionAge      time.Duration
	GRPCMaxConnectionAgeGrace time.Duration
	GRPCStreamWorkers         int
	GRPC                      GRPCBounds

	MaxRequestBytes int
	Limits          limiter.Limits // --max-descriptors, --max-entries, --max-entry-bytes

	MergeDomainConfig                     bool
	RulesOverlay                          string // --rules-overlay: extensions for rules over xDS
	Atomic                                bool
	ShadowMode                            bool // global shadow mode
	QuotaMode                             bool
	RulesMaxFileBytes, RulesMaxTotalBytes int64

	Memory         store.MemoryOptions // the embedded store's
	Breaker        breaker.Options     // the circuit breaker in front of Redis
	OverLimitCache overlimit.Options   // the local cache of keys over their limit, in front of Redis

	Redis    Redis
	Headers  rls.HeaderOptions
	Admin    Admin
	Metrics  metrics.Options
	Top      top.Options // /v1/top's identifiers (Keys 0: none)
	XDS      XDS
	GRPCTLS  TLS // the gRPC listener's
	Tracing  tracing.Options
	RefStats refstats.Options // envoyproxy/ratelimit's stats
	Health   Health
	RLQS     RLQS

	layout     RulesLayout       // from RUNTIME_*; zero: Config, flat
	src        map[string]string // flag -> how it was given (Name)
	warnings   []string
	notes      []string
	deprecated []string
}

// GRPCBounds bound what gRPC clients can open and hold.
type GRPCBounds struct {
	MaxConnections       int
	MaxConcurrentStreams int
	RequestTimeout       time.Duration
	MaxConnectionIdle    time.Duration
	KeepaliveMinTime     time.Duration
}

// Admin configures metrics and the admin listener.
type Admin struct {
	Addr string // empty or "off": none
	// MetricsAddr serves /metrics alone; empty or "off": none.
	MetricsAddr string
	// AllowedHosts are the names, comma-separated, that the admin
	// listener answers to in Host besides IP addresses and localhost.
	AllowedHosts string
	Pprof        bool
	// TokenFile holds the bearer tokens of admin writes, and TLSCert,
	// TLSKey and TLSClientCA serve the admin listener over TLS, a client
	// certificate verified against TLSClientCA authorizing writes.
	TokenFile                    string
	TLSCert, TLSKey, TLSClientCA string
}

// Off reports whether the admin listener is turned off.
func (a *Admin) Off() bool { return off(a.Addr) }

// MetricsOff reports whether --metrics-addr is not given.
func (a *Admin) MetricsOff() bool { return off(a.MetricsAddr) }

func off(addr string) bool { return addr == "" || strings.EqualFold(addr, "off") }

// HostNames are the names the admin listener answers to in Host besides
// IP addresses and localhost: --admin-allowed-hosts and --admin-addr's
// host if it is a name, in lower case.
func (a *Admin) HostNames() []string {
	var names []string
	for _, n := range strings.Split(a.AllowedHosts, ",") {
		if n = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(n), ".")); n != "" {
			names = append(names, n)
		}
	}
	if host, _, err := net.SplitHostPort(a.Addr); err == nil && host != "" && net.ParseIP(host) == nil {
		names = append(names, strings.ToLower(strings.TrimSuffix(host, ".")))
	}
	return names
}

// validate checks the authorization settings.
func (a *Admin) validate() error {
	switch {
	case (a.TLSCert == "") != (a.TLSKey == ""):
		return Bad("admin-tls-cert", "give --admin-tls-cert and --admin-tls-key together")
	case a.TLSClientCA != "" && a.TLSCert == "":
		return Bad("admin-tls-client-ca", "needs --admin-tls-cert and --admin-tls-key: client certificates are checked on a TLS listener")
	case !a.MetricsOff() && !a.Off() && a.MetricsAddr == a.Addr:
		return Bad("metrics-addr", "%s is --admin-addr's too: give another address, or none", a.MetricsAddr)
	}
	for _, n := range a.HostNames() {
		if strings.ContainsAny(n, "/:@ ") {
			return Bad("admin-allowed-hosts", "%q is not a host name", n)
		}
	}
	return nil
}

// Health says what the health endpoints check besides the rules.
type Health struct {
	RequiresRedis bool
	RequiresRules bool // of at least one domain
}

// TLS secures the gRPC listener.
type TLS struct {
	Enabled   bool
	Cert, Key string
	ClientCA  string
	ClientSAN string
}

// RulesLayout says where the rules files are and how they are found.
type RulesLayout struct {
	Dir  string        // what rules.LoadWith reads
	Load rules.Options // how
	// Recursive watches Dir as a tree; Root is the directory whose
	// symlink swap reloads (RUNTIME_WATCH_ROOT).
	Recursive bool
	Root      string
	// Overlay is --rules-overlay's file: FastLimit's extensions for rules
	// over xDS (rules.ParseOverlay); "" for none.
	Overlay string
}

// Rules returns the rules layout in force: the reference's, or --config.
func (s *Settings) Rules() RulesLayout {
	l := s.layout
	if l.Dir == "" {
		l = RulesLayout{Dir: s.Config}
	}
	l.Load.MergeDomains = s.MergeDomainConfig
	l.Load.MaxFileBytes, l.Load.MaxTotalBytes = noLimit(s.RulesMaxFileBytes), noLimit(s.RulesMaxTotalBytes)
	l.Overlay = s.RulesOverlay
	return l
}

// noLimit maps a size flag's 0 (no limit) to rules.Options'.
func noLimit(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// RefWarningMsg opens the startup warning that lists Warnings.
const RefWarningMsg = "envoyproxy/ratelimit settings that FastLimit does not honour"

// Warnings name the reference's variables that FastLimit does not honour:
// log them once at start.
func (s *Settings) Warnings() []string { return s.warnings }

// Notes say what FastLimit chose for the reference's variables left
// unset: log each once at start, at info.
func (s *Settings) Notes() []string { return s.notes }

// Deprecated says what to use instead of each deprecated flag given: log
// each once at start.
func (s *Settings) Deprecated() []string { return s.deprecated }

// ErrVersion is Parse's answer to --version (or -version) anywhere among
// the flags: print the version and exit.
var ErrVersion = errors.New("version requested")

// versionFlag is the server's --version: no setting, so no environment
// twin (VERSION is too common a variable) and no row of docs/settings.md.
const versionFlag = "version"

// commandsUsage heads the server's -h: the binary's subcommands.
const commandsUsage = `Usage:
  %[1]s [flags]              serve; every flag has an environment twin (--redis-url: REDIS_URL)
  %[1]s COMMAND [flags]      run a command; %[1]s COMMAND -h lists its flags

Commands:
  help      this, or with a command's name its flags
  check     validate a rules directory as the server loads it, every error with file and line
  version   print the version (also --version, anywhere among the flags)
  top       the top identifiers of each rule, from running servers' admin listeners
  explain   how running servers would decide a request, charging nothing
  reset     clear a descriptor's counters on running servers
  refund    give hits back to a descriptor on running servers
  usage     a descriptor's state, or an RLQS bucket's division, on running servers
  rlqs-serve  the child that --rlqs-process starts (not run by hand)

top, explain, reset, refund and usage exit 0 when done, 1 when a replica failed or
refused, 2 on bad usage, and explain 3 when the request would be OVER_LIMIT.

Flags (docs/settings.md describes them):
`

// Parse reads settings from args, then the flags' environment twins, then
// envoyproxy/ratelimit's variables. -h writes usage, the subcommands and
// the flags, to out and returns flag.ErrHelp; --version returns
// ErrVersion. Validate checks the whole.
func Parse(name string, args []string, getenv func(string) string, out io.Writer) (*Settings, error) {
	s := &Settings{}
	fs := newFlagSet(name, s, out)
	fs.Bool(versionFlag, false, "print the version and exit (as the version command)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), commandsUsage, name)
		fs.PrintDefaults()
	}
	if err := s.parseFlags(fs, args, getenv); err != nil {
		return nil, err
	}
	s.RefStats.Getenv = getenv
	s.RefStats.NearLimitRatio = s.Metrics.NearLimitRatio
	if err := applyRefEnv(s, fs, getenv); err != nil {
		return nil, err
	}
	s.deprecated = deprecations(s.src)
	return s, nil
}

// parseFlags parses args, then sets each flag not given from its twin or
// else the reference's variable for it (refNames). A positional argument
// is an error: the flag package would ignore every flag after it.
func (s *Settings) parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if v := fs.Lookup(versionFlag); v != nil && v.Value.String() == "true" {
		return ErrVersion
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: settings are flags (-h lists them); the commands are help, check, version, top, explain, reset, refund and usage", MaskCredentials(fs.Arg(0)))
	}
	s.src = map[string]string{}
	fs.Visit(func(f *flag.Flag) { s.src[canonical(f.Name)] = "--" + f.Name })
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		if s.src[f.Name] != "" || aliases[f.Name] != "" || f.Name == versionFlag {
			return
		}
		env, v := EnvName(f.Name), getenv(EnvName(f.Name))
		if ref := refNames[f.Name]; v == "" && ref != "" {
			env, v = ref, getenv(ref)
		}
		if v == "" {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q: %v", env, v, err))
			return
		}
		s.src[f.Name] = env
	})
	if len(errs) > 0 {
		return fmt.Errorf("environment: %s", strings.Join(errs, "; "))
	}
	return nil
}

// EnvName is the environment twin of a flag.
func EnvName(flagName string) string {
	return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// checked is a string flag whose Set normalises and checks the value.
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

// parseLogLevel accepts zap's and logrus' level names in any case.
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

// Error is a bad setting, named the way it was given (Settings.Named).
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

// Name is how flag's setting was given: "--flag" by default.
func (s *Settings) Name(flag string) string {
	if n := s.src[flag]; n != "" {
		return n
	}
	return "--" + flag
}

// Named makes an *Error in err name its setting as it was given.
func (s *Settings) Named(err error) error {
	var se *Error
	if errors.As(err, &se) && se.As == "" {
		se.As = s.Name(se.Flag)
	}
	return err
}

// Validate checks the settings; errors name each as it was given.
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
	if s.GRPCMaxConnectionAge < 0 || s.GRPCMaxConnectionAgeGrace < 0 {
		return s.Named(Bad("grpc-max-connection-age", "must not be negative"))
	}
	if err := s.validateBounds(); err != nil {
		return err
	}
	if err := s.XDS.validate(); err != nil {
		return err
	}
	if s.RulesOverlay != "" && !s.XDS.Enabled() {
		return s.Named(Bad("rules-overlay", "applies to rules over xDS (--config-type GRPC_XDS_SOTW); rules files carry FastLimit's extensions themselves"))
	}
	if !(s.Metrics.NearLimitRatio > 0 && s.Metrics.NearLimitRatio <= 1) {
		return s.Named(Bad("near-limit-ratio", "%v is not in (0, 1]", s.Metrics.NearLimitRatio))
	}
	if s.Metrics.MaxDetailedMetricSeries < 0 {
		return s.Named(Bad("max-detailed-metric-series", "%d is negative", s.Metrics.MaxDetailedMetricSeries))
	}
	if s.Top.Keys < 0 {
		return s.Named(Bad("top-keys", "%d is negative", s.Top.Keys))
	}
	if s.Top.Window <= 0 {
		return s.Named(Bad("top-window", "must be positive"))
	}
	if err := s.Admin.validate(); err != nil {
		return s.Named(err)
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
	return s.Redis.validate()
}

// validateBounds checks the gRPC bounds and the rules size limits.
func (s *Settings) validateBounds() error {
	for _, c := range []struct {
		flag string
		bad  bool
	}{
		{"grpc-max-connections", s.GRPC.MaxConnections < 0},
		{"grpc-max-concurrent-streams", s.GRPC.MaxConcurrentStreams < 1},
		{"grpc-request-timeout", s.GRPC.RequestTimeout < 0},
		{"grpc-max-connection-idle", s.GRPC.MaxConnectionIdle < 0},
		{"grpc-keepalive-min-time", s.GRPC.KeepaliveMinTime < 0},
		{"rules-max-file-bytes", s.RulesMaxFileBytes < 0},
		{"rules-max-total-bytes", s.RulesMaxTotalBytes < 0},
	} {
		if c.bad {
			return s.Named(Bad(c.flag, "out of range"))
		}
	}
	return nil
}
