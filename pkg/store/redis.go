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
	// Batches is how many pipelines may be at one server (Cluster master)
	// at once; Takes arriving meanwhile merge into the next (default 2).
	Batches int
	// PipelineWindow is how long a Take may wait for company before its call
	// leaves, when Takes arrive while calls are under way at a rate that
	// makes company likely, or pile up behind them (0: never; a quiet
	// server, and a lone caller, never wait). docs/redis.md, "Batching and
	// the gather window".
	PipelineWindow time.Duration
	// PipelineLimit ends that wait once this many ops wait (default 255).
	PipelineLimit int
	// SendTimeout bounds one pipeline, which goes on after its callers
	// give up so that a connection being dialled gets ready (default 3s).
	SendTimeout time.Duration
}

// NoMerging as RedisOptions.Batches lets every Take send its own call.
const NoMerging = 1 << 30

// DefaultDialTimeout bounds a connection's dial and handshake when neither
// ConnOptions nor the URL say otherwise.
const DefaultDialTimeout = time.Second

// ConnOptions are connection settings applied on top of a URL's. Zero fields
// keep the URL's value, or DefaultDialTimeout, or go-redis' default.
type ConnOptions struct {
	PoolSize     int
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// Name is every connection's CLIENT SETNAME (empty: none).
	Name string
	// MaxConns, if positive, bounds a node's connections, pipelines
	// included (go-redis's PoolSize does not): a call past it waits for one.
	MaxConns int
}

// pipelinePool is go-redis's PipelinePoolSize: its default, or none
// (pipelines on the bounded pool) under MaxConns.
func (c ConnOptions) pipelinePool() int {
	if c.MaxConns > 0 {
		return -1
	}
	return 0
}

// Redis is a limiter.Store and limiter.AllOrNothingStore on a Redis server, a
// Cluster or a Sentinel-managed master: the algorithms run as Lua scripts
// at Redis TIME, so every replica shares one state and one clock.
// Concurrent Takes bound for one server (Cluster master) merge into shared
// script calls; a call is never sent twice, nor after its callers gave up,
// and only calls that provably did not run (NOSCRIPT, a redirect) are sent
// again (docs/design.md, "The Redis store"). It is safe for concurrent use.
//
// Its client must not retry commands, or ops could be charged twice: build
// it with NewClient, or set MaxRetries -1 and ContextTimeoutEnabled.
type Redis struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless client is one
	log     *zap.Logger
	opts    RedisOptions

	single *batcher // the server's, when not a Cluster

	mu        sync.Mutex
	nodes     map[*redis.Client]*batcher // a Cluster's, by master
	gathering *gatherSum                 // shared by nodes' batchers
	perSlot   atomic.Bool                // Cluster nodes refuse cross-slot calls

	close sync.Once
}

// Client returns the client r decides on; r keeps owning it.
func (r *Redis) Client() redis.UniversalClient { return r.client }

// NewRedis returns a Redis on client (single-node, Sentinel or Cluster). It
// does no I/O: Open loads the scripts, or the first Take that misses them.
func NewRedis(client redis.UniversalClient, logger *zap.Logger, opts RedisOptions) *Redis {
	if logger == nil {
		logger = zap.NewNop()
	}
	if opts.Batches <= 0 {
		opts.Batches = 2
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = 3 * time.Second
	}
	r := &Redis{client: client, log: logger, opts: opts}
	if cc, ok := client.(*redis.ClusterClient); ok {
		r.cluster = cc
		r.nodes = make(map[*redis.Client]*batcher)
		r.gathering = new(gatherSum)
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

// RedisOptionsFromURL parses a redis:// or rediss:// URL as go-redis'
// ParseURL does, applies conn, turns retries off and ContextTimeoutEnabled
// on. It refuses max_retries; its errors never hold the password.
func RedisOptionsFromURL(rawURL string, conn ConnOptions) (*redis.Options, error) {
	safe := RedactURL(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil {
		// The parser's message may quote a password read as a host.
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
	positive(&opt.PoolSize, c.PoolSize)
	positive(&opt.DialTimeout, c.DialTimeout)
	positive(&opt.ReadTimeout, c.ReadTimeout)
	positive(&opt.WriteTimeout, c.WriteTimeout)
	if c.Name != "" {
		opt.ClientName = c.Name
	}
	opt.MaxActiveConns, opt.PipelinePoolSize = c.MaxConns, c.pipelinePool()
	if opt.DialTimeout <= 0 {
		opt.DialTimeout = DefaultDialTimeout
	}
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = true
}

func positive[T int | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
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
	// Between the first ':' and the last '@' may be a password.
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
	scripts := []*script{takeScript, fixedScript, takeAllScript}
	if r.cluster != nil {
		scripts = append(scripts, takeCrossScript)
	}
	for _, s := range scripts {
		sha, err := r.client.ScriptLoad(ctx, s.src).Result()
		if err != nil {
			if s.spread() { // Redis before 7: no script flags, one slot a call
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

// ProbeKey is the base key Probe charges, apart from every limit's (theirs
// have the hash tag right after the prefix).
const ProbeKey = "fastlimit:probe:{probe}:"

// Probe checks that Redis decides, not only answers: a one-second
// fixed-window charge on ProbeKey through Take's path, so it fails where
// decisions fail (scripts refused, out of memory, read-only, unreachable).
// On a Cluster it checks ProbeKey's master. It implements breaker.Prober.
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

// begin refuses invalid ops (checkErr), finishes a call of no ops, and fails
// one whose ctx has ended; send reports whether to go on.
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

// IsNoScript reports whether err is Redis's NOSCRIPT: the script was not
// in the server's cache (flushed, or a new node), so the call did not run
// and may be sent again after SCRIPT LOAD.
func IsNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

func unavailable(what string, err error) error {
	return fmt.Errorf("redis %s: %w: %w", what, limiter.ErrUnavailable, err)
}
