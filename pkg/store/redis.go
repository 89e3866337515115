package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// Log keys.
const (
	logKeyAddr  = "addr"
	logKeyOps   = "ops"
	logKeyRetry = "max_retries"
)

var _ limiter.Store = (*Redis)(nil)

// RedisOptions configures a Redis.
type RedisOptions struct {
	// CloseClient makes Close close the client as well.
	CloseClient bool
	// InFlight is how many script calls' pipelines may be at one server (or
	// one Cluster node) at once; Takes that arrive meanwhile are merged
	// into the next (default 2; NoMerging: every Take sends its own).
	InFlight int
	// Gather is how long a script call waits for more Takes before it is
	// sent, when Takes have been arriving together (0: never; a lone
	// caller never waits). Redis pays for a call about as much as for
	// four decisions in it, so larger calls cost it less per decision.
	Gather time.Duration
	// GatherOps ends the wait early once this many ops wait (default 255,
	// a full script call).
	GatherOps int
	// SendTimeout bounds one pipeline, whatever its callers' deadlines
	// (default 3s). Callers wait no longer than their own context allows,
	// but their pipeline goes on without them, so that a connection that
	// is still being dialled and authenticated gets ready for the next.
	SendTimeout time.Duration
}

// NoMerging as RedisOptions.InFlight lets every Take send its own script
// call at once.
const NoMerging = 1 << 30

// DefaultDialTimeout bounds a connection's dial and handshake when neither
// ConnOptions nor the URL say otherwise.
const DefaultDialTimeout = time.Second

// ConnOptions are connection settings applied on top of a URL's. Zero
// fields keep the URL's value, or DefaultDialTimeout, or go-redis'
// default.
type ConnOptions struct {
	PoolSize     int
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
}

// Redis is a limiter.Store that runs the algorithms as Lua scripts (package
// lua) on a Redis server, a Cluster or a Sentinel-managed server, through
// go-redis, so that every server instance shares the same state and the
// same clock (Redis TIME). It is safe for concurrent use.
//
// Concurrent Takes bound for one server (one Cluster node) are merged: at
// most InFlight pipelines are at a server at once, and the ops of the
// Takes that arrive meanwhile leave together in the next, as take.lua
// calls that decide any number of ops each. On a Cluster, a call carries
// the keys of every slot its node serves when the nodes run Redis 7 or
// later (the script flag allow-cross-slot-keys, the keys in ARGV), else of
// one slot; the nodes' batchers gather together (gatherGroup). An op whose
// slot moved away from the node is left undecided there, and a call
// answered MOVED, ASK or TRYAGAIN did not run: they are sent again through
// the Cluster client, slot by slot. Every call carries a tag that the
// script echoes: a reply without it fails its call (go-redis closes a
// connection that holds unread replies, so the drift does not last).
// Replies of NOSCRIPT (after SCRIPT FLUSH, a restart or a failover) mean
// the call did not run: it is sent again with EVAL, which also loads the
// script, so a flush costs a round trip but no decision. Any other failure
// fails the call, and nothing is retried, because an op that may have run
// must not run twice.
//
// The client must not retry commands itself (MaxRetries -1, as
// RedisOptionsFromURL sets it): go-redis re-sends a whole pipeline after a
// read error, and ops that had already run would be charged twice. It
// should also have ContextTimeoutEnabled. A Cluster client re-sends
// pipelines whatever its MaxRetries; use NewClient, whose clients of every
// type (single, cluster, sentinel) never re-send.
type Redis struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless client is one
	log     *zap.Logger
	opts    RedisOptions

	single *batcher // the server's, when not a Cluster

	mu        sync.Mutex
	nodes     map[*redis.Client]*batcher // a Cluster's, by master
	gathering *gatherGroup               // shared by nodes' batchers
	perSlot   atomic.Bool                // Cluster nodes refuse cross-slot calls

	close sync.Once
}

// Client returns the client r decides on; r keeps owning it.
func (r *Redis) Client() redis.UniversalClient { return r.client }

// NewRedis returns a Redis that uses client, which may be a single-node,
// Sentinel or Cluster client. It does no I/O; the scripts are loaded by
// Open, or on the first Take that finds them missing (NOSCRIPT, then EVAL).
func NewRedis(client redis.UniversalClient, logger *zap.Logger, opts RedisOptions) *Redis {
	if logger == nil {
		logger = zap.NewNop()
	}
	if opts.InFlight <= 0 {
		opts.InFlight = 2
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = 3 * time.Second
	}
	r := &Redis{client: client, log: logger, opts: opts}
	if cc, ok := client.(*redis.ClusterClient); ok {
		r.cluster = cc
		r.nodes = make(map[*redis.Client]*batcher)
		r.gathering = new(gatherGroup)
	} else {
		r.single = r.newBatcher(func(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
			return r.send(ctx, client, ops, results)
		})
	}
	if n, ok := clientRetries(client); ok && n > 0 {
		r.log.Warn("redis client retries failed commands; a retried pipeline may charge ops twice, set MaxRetries to -1",
			zap.Int(logKeyRetry, n))
	}
	return r
}

// clientRetries returns how often the client retries a failed command, if
// it says: go-redis reports a MaxRetries of -1 as 0.
func clientRetries(c redis.UniversalClient) (int, bool) {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().MaxRetries, true
	case *redis.ClusterClient:
		return c.Options().MaxRetries, true
	}
	return 0, false
}

// RedisOptionsFromURL parses a redis:// or rediss:// URL, as go-redis'
// ParseURL does, and applies conn on top. It turns client retries off
// (MaxRetries -1) and ContextTimeoutEnabled on; see Redis. Its errors
// never contain the URL's password.
func RedisOptionsFromURL(rawURL string, conn ConnOptions) (*redis.Options, error) {
	safe := RedactURL(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil {
		// A URL that does not parse may have its password read as a host
		// or port, which the parser's message would quote: give its
		// reason only when there are no credentials.
		var uerr *url.Error
		if !strings.Contains(rawURL, "@") && errors.As(err, &uerr) {
			return nil, fmt.Errorf("parse redis URL %q: %w", safe, uerr.Err)
		}
		return nil, fmt.Errorf("parse redis URL %q: malformed URL", safe)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("parse redis URL %q: scheme must be redis or rediss", safe)
	}
	if v := u.Query().Get("max_retries"); v != "" && v != "0" && v != "-1" {
		return nil, fmt.Errorf("parse redis URL %q: max_retries=%s: FastLimit never sends a script call twice "+
			"(one that may have run would be charged twice); remove the option", safe, v)
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		msg := err.Error()
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
		return nil, fmt.Errorf("parse redis URL %q: %s", safe, msg)
	}
	conn.apply(opt)
	return opt, nil
}

// apply puts c's settings on top of opt, with FastLimit's defaults: a
// 1-second dial, no client retries, context deadlines honoured.
func (c ConnOptions) apply(opt *redis.Options) {
	if c.PoolSize > 0 {
		opt.PoolSize = c.PoolSize
	}
	if c.DialTimeout > 0 {
		opt.DialTimeout = c.DialTimeout
	}
	if c.ReadTimeout > 0 {
		opt.ReadTimeout = c.ReadTimeout
	}
	if c.WriteTimeout > 0 {
		opt.WriteTimeout = c.WriteTimeout
	}
	if opt.DialTimeout <= 0 {
		opt.DialTimeout = DefaultDialTimeout
	}
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = true
}

// NewRedisFromURL returns a Redis with its own single-node client, made by
// RedisOptionsFromURL. Close closes the client.
func NewRedisFromURL(rawURL string, conn ConnOptions, logger *zap.Logger) (*Redis, error) {
	opt, err := RedisOptionsFromURL(rawURL, conn)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	logger = logger.With(zap.String(logKeyAddr, RedactURL(rawURL)))
	return NewRedis(redis.NewClient(opt), logger, RedisOptions{CloseClient: true}), nil
}

// RedactURL returns rawURL with any password replaced by "xxxxx", also when
// rawURL does not parse.
func RedactURL(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Redacted()
	}
	// Whatever lies between the first ':' and the last '@' after the
	// scheme may be the password.
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		scheme, rest = "", rawURL
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return rawURL
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return rawURL
	}
	if ok {
		scheme += "://"
	}
	return scheme + user + ":xxxxx" + rest[at:]
}

// Open checks that Redis answers and loads the scripts. Calling it is
// optional: the first Take loads the scripts too.
func (r *Redis) Open(ctx context.Context) error {
	if err := r.Ping(ctx); err != nil {
		return err
	}
	return r.Load(ctx)
}

// Load loads the scripts with SCRIPT LOAD (on every master of a Cluster).
func (r *Redis) Load(ctx context.Context) error {
	scripts := []script{takeScript, atomicScript}
	if r.cluster != nil {
		scripts = append(scripts, takeCrossScript)
	}
	for _, s := range scripts {
		sha, err := r.client.ScriptLoad(ctx, s.src).Result()
		if err != nil {
			if s.spread() {
				// Redis before 7 knows no script flags: calls go slot by
				// slot instead.
				r.perSlot.Store(true)
				continue
			}
			return unavailable("load script "+s.name, err)
		}
		if sha != s.sha {
			return fmt.Errorf("load script %s: %w: server digest %s, want %s", s.name, limiter.ErrUnavailable, sha, s.sha)
		}
	}
	return nil
}

// Ping sends PING.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.client.Ping(ctx).Err(); err != nil {
		return unavailable("ping", err)
	}
	return nil
}

// ProbeKey is the base key Probe charges, apart from every limit's: a
// limit's key has the hash tag right after its prefix (prefix:{...}).
const ProbeKey = "fastlimit:probe:{probe}:"

// Probe checks that Redis decides, not only that it answers: one
// fixed-window charge of one milli-request on ProbeKey, a window of a
// second (the counter expires with it), through the path of every Take.
// It fails where decisions fail: scripts refused (out of memory with
// noeviction, a read-only replica, NOSCRIPT that EVAL cannot repair), or
// Redis unreachable. On a Cluster it checks the master of ProbeKey's slot.
// It implements breaker.Prober.
func (r *Redis) Probe(ctx context.Context) error {
	ops := [1]limiter.Op{{Key: ProbeKey, Algorithm: descriptors.FixedWindow, Limit: 1, Window: 1000, Cost: 1}}
	var res [1]limiter.Result
	if err := r.Take(ctx, ops[:], res[:]); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	return nil
}

// Close fails the Takes that wait, and closes the client if the Redis owns
// it (NewRedisFromURL, or RedisOptions.CloseClient). It is idempotent.
func (r *Redis) Close() error {
	var err error
	r.close.Do(func() {
		if r.single != nil {
			r.single.close()
		}
		r.mu.Lock()
		for _, b := range r.nodes {
			b.close()
		}
		r.mu.Unlock()
		if r.opts.CloseClient {
			err = r.client.Close()
		}
	})
	return err
}

// begin runs the checks every call of a Redis store starts with: invalid
// ops (checkErr) are refused unsent, a call without ops is done, a call
// whose ctx has ended is Unavailable. send reports whether to go on.
func begin(ctx context.Context, what string, checkErr error, ops int) (send bool, err error) {
	switch {
	case checkErr != nil:
		return false, checkErr
	case ops == 0:
		return false, nil
	case ctx.Err() != nil:
		return false, unavailable(what, ctx.Err())
	}
	return true, nil
}

func isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

func unavailable(what string, err error) error {
	return fmt.Errorf("redis %s: %w: %w", what, limiter.ErrUnavailable, err)
}
