package settings

import (
	"flag"
	"fmt"
	"runtime"
	"time"

	"github.com/fastlimit/fastlimit/internal/observe/refstats"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// RLQS configures the Rate Limit Quota Service (docs/rlqs.md).
type RLQS struct {
	Enabled      bool
	ReportPeriod time.Duration
	TTLPeriods   float64
	IdleAfter    time.Duration // 0: never
	Unmatched    string        // allow or deny
	// OnStoreError is keep, split, allow or deny; empty follows
	// --on-store-error (allow and deny as themselves, error as keep).
	OnStoreError string
	StoreGrace   time.Duration // 0: one assignment TTL
	Replica      string        // empty: random
	Headroom     float64
	// KeepaliveTime and KeepaliveTimeout are the gRPC server's pings of
	// silent connections while RLQS is on.
	KeepaliveTime, KeepaliveTimeout time.Duration
	MaxReportBytes                  int
	// RequireClientIdentity refuses streams without a client certificate.
	RequireClientIdentity bool
	// RedisPoolSize and StoreTimeout are the demand exchanges' own Redis
	// connections (0: 2 per CPU) and time bound, apart from RLS's.
	RedisPoolSize int
	StoreTimeout  time.Duration
	// MaxBucketsPerStream, MaxBuckets and MaxStreams bound what Envoys
	// hold (0: no bound).
	MaxBucketsPerStream, MaxBuckets, MaxStreams int
	// ReportWorkers bounds the reports worked on at once (0: one per CPU;
	// -1: no bound).
	ReportWorkers int
	// Addr is RLQS's own gRPC listener (empty: the gRPC listener).
	Addr string
	// Process serves RLQS from a child process at nice value Nice.
	Process bool
	Nice    int
	// Child is set in that child (fastlimit rlqs-serve), never by a flag:
	// it serves RLQS alone, on the listeners its parent passed it.
	Child bool
}

// DefaultRLQSNice is the default --rlqs-nice: the lowest priority, so that
// RateLimitService's process runs first whenever both wait for a CPU
// (BENCHMARKS.md, "RLQS in a process of its own").
const DefaultRLQSNice = 19

// DefaultRLQSMaxReportBytes is the default --rlqs-max-report-bytes, the
// report of the largest Envoy docs/rlqs.md ("Large Envoys") sizes.
const DefaultRLQSMaxReportBytes = 16 << 20

func addRLQSFlags(fs *flag.FlagSet, o *RLQS) {
	fs.BoolVar(&o.Enabled, "rlqs", false,
		"serve Envoy's Rate Limit Quota Service (envoy.service.rate_limit_quota.v3) on the gRPC listener: global limits divided among the Envoys that share them, enforced by Envoy locally (Envoy marks its filter work in progress)")
	fs.DurationVar(&o.ReportPeriod, "rlqs-report-period", 5*time.Second,
		"the period at which Envoys report usage: Envoy's is 5s whatever its reporting_interval says; change it only for clients that report otherwise")
	fs.Float64Var(&o.TTLPeriods, "rlqs-ttl-periods", rlqs.DefaultTTLPeriods,
		"an assignment's life in report periods (at least 2), refreshed at each report: how long an Envoy keeps its share when it cannot reach FastLimit; it must outlast the Envoy's keepalive detecting a lost replica and its next report")
	fs.DurationVar(&o.IdleAfter, "rlqs-idle-after", 10*time.Minute,
		"abandon an Envoy's bucket after this long without a request in it (Envoy subscribes again at its next request; 0: never)")
	fs.StringVar(&o.Unmatched, "rlqs-unmatched", "allow",
		"what a bucket that matches no rule is assigned: allow (ALLOW_ALL, as RateLimitService answers OK) or deny (DENY_ALL)")
	fs.StringVar(&o.OnStoreError, "rlqs-on-store-error", "",
		"while Redis fails: keep (divide with the demand last read, for --rlqs-store-grace, then as split), split (each replica divides its part of the limit, limit / replicas last seen), allow (ALLOW_ALL) or deny (DENY_ALL); empty follows --on-store-error (error as keep)")
	fs.DurationVar(&o.StoreGrace, "rlqs-store-grace", 0,
		"how long keep divides with the demand last read from Redis (0: one assignment TTL)")
	fs.StringVar(&o.Replica, "rlqs-replica", "",
		"this replica's name among those sharing Redis: letters, digits, '-', '_', '.', ':' (empty: a random name at each start); two live replicas must not share one")
	fs.Float64Var(&o.Headroom, "rlqs-headroom", 0.1,
		"fraction added to an Envoy's measured demand when dividing, so that growing demand passes until the next report shows it")
	fs.DurationVar(&o.KeepaliveTime, "rlqs-keepalive-time", 30*time.Second,
		"with --rlqs, ping a gRPC connection silent this long (Envoys report every 5s, so only a lost one is pinged; it applies to every connection of the listener that serves RLQS: --grpc-addr, or --rlqs-addr alone)")
	fs.DurationVar(&o.KeepaliveTimeout, "rlqs-keepalive-timeout", 10*time.Second,
		"with --rlqs, close a connection whose ping is not answered within this, ending its RLQS streams")
	fs.IntVar(&o.MaxReportBytes, "rlqs-max-report-bytes", DefaultRLQSMaxReportBytes,
		"largest RLQS usage report accepted, in bytes (an Envoy sends all its buckets in one, about 80 bytes each); a larger one ends its stream and is counted")
	fs.IntVar(&o.MaxBucketsPerStream, "rlqs-max-buckets-per-stream", rlqs.DefaultMaxBucketsPerStream,
		"most buckets one RLQS stream holds; a report's new buckets past it are answered nothing (Envoy's no_assignment_behavior applies) and counted (0: no bound)")
	fs.IntVar(&o.MaxBuckets, "rlqs-max-buckets", rlqs.DefaultMaxBuckets,
		"most buckets all RLQS streams of this replica hold, about 3 KiB each (docs/operations.md, \"Bounds\"); new buckets past it are answered nothing and counted (0: no bound)")
	fs.IntVar(&o.MaxStreams, "rlqs-max-streams", rlqs.DefaultMaxStreams,
		"most RLQS streams open on this replica, besides --grpc-max-connections; another is refused with ResourceExhausted and counted (0: no bound)")
	fs.IntVar(&o.ReportWorkers, "rlqs-report-workers", 0,
		"most RLQS usage reports worked on at once, so that quota work leaves CPU to RateLimitService: a stream's report waits for a worker (a report waiting on Redis gives its worker up meanwhile) and those it sends meanwhile are merged into it, counted in fastlimit_rlqs_shed_reports_total (0: one per CPU, at least 2; -1: no bound)")
	fs.BoolVar(&o.RequireClientIdentity, "rlqs-require-client-identity", false,
		"refuse, Unauthenticated, RLQS streams whose client certificate names no identity (neither a SPIFFE URI SAN nor a subject); needs --grpc-tls-client-ca. With or without it, the streams of one identity count as one client")
	fs.IntVar(&o.RedisPoolSize, "rlqs-redis-pool-size", 0,
		"Redis connections of the RLQS demand exchanges, apart from RateLimitService's --redis-pool-size (0: 2 per CPU)")
	fs.StringVar(&o.Addr, "rlqs-addr", "",
		"with --rlqs, serve RLQS on a gRPC listener of its own at this address (host:port) instead of --grpc-addr's; Envoy's rate_limit_quota filter names it as its own cluster anyway")
	fs.BoolVar(&o.Process, "rlqs-process", false,
		"with --rlqs and --rlqs-addr, serve RLQS from a child process of its own (this binary again, started and restarted by this one) at --rlqs-nice, so that quota reports never take RateLimitService's CPU; its metrics are on this process's /metrics")
	fs.IntVar(&o.Nice, "rlqs-nice", DefaultRLQSNice,
		"with --rlqs-process, the child's nice value, 0 to 19 (19: it runs only when RateLimitService's process leaves a CPU)")
	fs.DurationVar(&o.StoreTimeout, "rlqs-store-timeout", time.Second,
		"longest wait for one RLQS demand exchange with Redis (its connections' read and write timeout too); RateLimitService's calls never wait for these")
}

// RedisPoolConns is the demand exchanges' Redis pool size per server.
func (o *RLQS) RedisPoolConns() int {
	if o.RedisPoolSize > 0 {
		return o.RedisPoolSize
	}
	return 2 * runtime.GOMAXPROCS(0)
}

// Policy returns the store failure policy in force, given --on-store-error.
func (o *RLQS) Policy(onStoreError string) (rlqs.StorePolicy, error) {
	if o.OnStoreError == "" {
		p, err := limiter.ParseFailurePolicy(onStoreError)
		if err != nil {
			return 0, fmt.Errorf("--on-store-error %w", err)
		}
		return rlqs.PolicyFor(p), nil
	}
	return rlqs.ParseStorePolicy(o.OnStoreError)
}

// Options returns the service's options the settings give; the caller
// adds rules, store, logger, metrics and tracing.
func (o *RLQS) Options(onStoreError string) (rlqs.Options, error) {
	policy, err := o.Policy(onStoreError)
	if err != nil {
		return rlqs.Options{}, Bad("rlqs-on-store-error", "%v", err)
	}
	unmatched, err := rlqs.ParseUnmatched(o.Unmatched)
	if err != nil {
		return rlqs.Options{}, Bad("rlqs-unmatched", "%v", err)
	}
	idle := o.IdleAfter
	if idle == 0 {
		idle = -1
	}
	return rlqs.Options{
		Replica:         o.Replica,
		ReportPeriod:    o.ReportPeriod,
		TTLPeriods:      o.TTLPeriods,
		IdleAfter:       idle,
		Unmatched:       unmatched,
		OnStoreError:    policy,
		StoreGrace:      o.StoreGrace,
		StoreTimeout:    o.StoreTimeout,
		RequireIdentity: o.RequireClientIdentity,
		Division:        quota.Config{Headroom: o.Headroom},
		// A flag's 0 (no bound) is Options' negative.
		MaxBucketsPerStream: noBound(o.MaxBucketsPerStream),
		MaxBuckets:          noBound(o.MaxBuckets),
		MaxStreams:          noBound(o.MaxStreams),
		ReportWorkers:       o.ReportWorkers, // 0 and -1 mean in Options what they mean here
	}, nil
}

// RecvBytes is the gRPC server's receive limit for --max-request-bytes
// of RateLimitService: the larger of it and, with --rlqs, the RLQS
// report limit (each service enforces its own below it).
func (o *RLQS) RecvBytes(maxRequestBytes int) int {
	if !o.Enabled {
		return maxRequestBytes
	}
	return max(maxRequestBytes, o.MaxReportBytes)
}

// validate checks the RLQS settings.
func (o *RLQS) validate(s *Settings) error {
	if !o.Enabled {
		switch {
		case o.Addr != "":
			return s.Named(Bad("rlqs-addr", "needs --rlqs"))
		case o.Process:
			return s.Named(Bad("rlqs-process", "needs --rlqs"))
		}
		return nil
	}
	if _, err := o.Options(s.OnStoreError); err != nil {
		return s.Named(err)
	}
	switch {
	case o.ReportPeriod < time.Second:
		return s.Named(Bad("rlqs-report-period", "%v is under 1s: Envoy reads times in whole seconds", o.ReportPeriod))
	case o.TTLPeriods < 2:
		return s.Named(Bad("rlqs-ttl-periods", "%v: an assignment must outlive at least 2 report periods", o.TTLPeriods))
	case o.IdleAfter < 0:
		return s.Named(Bad("rlqs-idle-after", "must not be negative"))
	case o.StoreGrace < 0:
		return s.Named(Bad("rlqs-store-grace", "must not be negative"))
	case !(o.Headroom >= 0 && o.Headroom <= 10):
		return s.Named(Bad("rlqs-headroom", "%v is not in [0, 10]", o.Headroom))
	case o.KeepaliveTime < time.Second:
		return s.Named(Bad("rlqs-keepalive-time", "%v is under 1s", o.KeepaliveTime))
	case o.KeepaliveTimeout < time.Second:
		return s.Named(Bad("rlqs-keepalive-timeout", "%v is under 1s", o.KeepaliveTimeout))
	case o.MaxReportBytes < 1<<10:
		return s.Named(Bad("rlqs-max-report-bytes", "%d is under 1 KiB", o.MaxReportBytes))
	case o.RedisPoolSize < 0:
		return s.Named(Bad("rlqs-redis-pool-size", "must not be negative"))
	case o.ReportWorkers < -1:
		return s.Named(Bad("rlqs-report-workers", "%d: a number of workers, 0 (one per CPU) or -1 (no bound)", o.ReportWorkers))
	case o.StoreTimeout < time.Millisecond:
		return s.Named(Bad("rlqs-store-timeout", "%v is under 1ms", o.StoreTimeout))
	case o.Process && o.Addr == "":
		return s.Named(Bad("rlqs-process", "needs --rlqs-addr: the child serves RLQS on a listener of its own"))
	case o.Nice < 0 || o.Nice > 19:
		return s.Named(Bad("rlqs-nice", "%d is not in [0, 19]", o.Nice))
	case o.RequireClientIdentity && s.GRPCTLS.ClientCA == "":
		return s.Named(Bad("rlqs-require-client-identity", "needs --grpc-tls-client-ca: an identity is a verified client certificate"))
	}
	for _, b := range []struct {
		flag string
		n    int
	}{{"rlqs-max-buckets-per-stream", o.MaxBucketsPerStream}, {"rlqs-max-buckets", o.MaxBuckets}, {"rlqs-max-streams", o.MaxStreams}} {
		if b.n < 0 {
			return s.Named(Bad(b.flag, "must not be negative"))
		}
	}
	if !validReplica(o.Replica) {
		return s.Named(Bad("rlqs-replica", "%q holds characters other than letters, digits, '-', '_', '.' and ':'", o.Replica))
	}
	return nil
}

// noBound maps a bound flag's 0 (no bound) to rlqs.Options' negative.
func noBound(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func validReplica(name string) bool {
	for _, c := range name {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}

// AsRLQSChild turns these settings, parsed from the parent's arguments
// and environment, into those of --rlqs-process's child: RLQS alone, on
// the listeners the parent passes, with none of the parent's other
// listeners, reports or trackers (its own metrics reach the parent's
// /metrics), and no drain of its own: the parent has drained when it
// stops the child.
func (s *Settings) AsRLQSChild() {
	s.RLQS.Child = true
	s.Drain = 0
	s.Admin.Addr, s.Admin.MetricsAddr = "off", "off"
	s.RefStats = refstats.Options{StatsOff: true, NearLimitRatio: s.RefStats.NearLimitRatio}
	s.Top.Keys = 0
}
