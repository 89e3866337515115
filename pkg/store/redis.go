package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/lua"
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
}

// ConnOptions are connection settings applied on top of a URL's. Zero
// fields keep the URL's value or go-redis' default.
type ConnOptions struct {
	PoolSize     int
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
}

// Redis is a limiter.Store that runs the algorithms as Lua scripts (package
// lua) on a Redis server, so that every server instance shares the same
// state and the same clock (Redis TIME). It is safe for concurrent use.
//
// Take sends all ops of a call in one pipeline, as EVALSHA. Replies of
// NOSCRIPT (after SCRIPT FLUSH, a restart or a failover) mean the op did
// not run: Take re-sends just those ops with EVAL, which also loads the
// script again, so a flush costs a round trip but no decision. Any other
// failure fails the whole call, and nothing is retried, because an op that
// may have run must not run twice.
//
// The client must not retry commands itself (MaxRetries -1, as
// RedisOptionsFromURL sets it): go-redis re-sends a whole pipeline after a
// read error, and ops that had already run would be charged twice. It
// should also have ContextTimeoutEnabled, so that Take honours ctx's
// deadline rather than the client's ReadTimeout. A Cluster client re-sends
// pipelines whatever its MaxRetries; use NewClient, whose clients of every
// type (single, cluster, sentinel) never re-send.
type Redis struct {
	client redis.UniversalClient
	log    *zap.Logger
	owns   bool

	scripts [3]script // by descriptors.Algorithm
	close   sync.Once
}

type script struct {
	name, src, sha string
}

// algorithmScripts returns the scripts by algorithm, with their digests.
func algorithmScripts() [3]script {
	var all [3]script
	for _, alg := range []descriptors.Algorithm{descriptors.FixedWindow, descriptors.SlidingWindow, descriptors.TokenBucket} {
		src := lua.Script(alg)
		sum := sha1.Sum([]byte(src))
		all[alg] = script{name: alg.String(), src: src, sha: hex.EncodeToString(sum[:])}
	}
	return all
}

// NewRedis returns a Redis that uses client, which may be a single-node,
// Sentinel or Cluster client. It does no I/O; the scripts are loaded by
// Open, or on the first Take that finds them missing (NOSCRIPT, then EVAL).
func NewRedis(client redis.UniversalClient, logger *zap.Logger, opts RedisOptions) *Redis {
	if logger == nil {
		logger = zap.NewNop()
	}
	r := &Redis{client: client, log: logger, owns: opts.CloseClient, scripts: algorithmScripts()}
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
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		msg := err.Error()
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
		return nil, fmt.Errorf("parse redis URL %q: %s", safe, msg)
	}
	if conn.PoolSize > 0 {
		opt.PoolSize = conn.PoolSize
	}
	if conn.DialTimeout > 0 {
		opt.DialTimeout = conn.DialTimeout
	}
	if conn.ReadTimeout > 0 {
		opt.ReadTimeout = conn.ReadTimeout
	}
	if conn.WriteTimeout > 0 {
		opt.WriteTimeout = conn.WriteTimeout
	}
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = true
	return opt, nil
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
	for _, s := range r.scripts {
		sha, err := r.client.ScriptLoad(ctx, s.src).Result()
		if err != nil {
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

// Close closes the client if the Redis owns it (NewRedisFromURL, or
// RedisOptions.CloseClient). It is idempotent.
func (r *Redis) Close() error {
	var err error
	r.close.Do(func() {
		if r.owns {
			err = r.client.Close()
		}
	})
	return err
}

// Take decides ops in one round trip, two if the server lost the scripts;
// see Redis. Ops run in order, except that an op answered NOSCRIPT runs
// after the ops behind it that did run (which only happens while scripts
// are being flushed). An error wraps limiter.ErrUnavailable, or
// ErrInvalidOp for ops that were not sent.
func (r *Redis) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	if send, err := begin(ctx, "take", checkOps(ops, results), len(ops)); !send {
		return err
	}
	// Scripts are not loaded here: an op answered NOSCRIPT is re-sent with
	// EVAL, which caches the script, so a server that lost its scripts (or
	// a node SCRIPT LOAD could not reach) costs one extra round trip, once.
	cmds := make([]*redis.Cmd, len(ops))
	pipe := r.client.Pipeline()
	for i := range ops {
		cmds[i] = r.eval(ctx, pipe, &ops[i], true)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below

	var missing []int
	for i, cmd := range cmds {
		err := cmd.Err()
		if err != nil && isNoScript(err) {
			missing = append(missing, i)
			continue
		}
		if err := readResult(cmd, results[i:i+1]); err != nil {
			return unavailable("take "+r.scripts[ops[i].Algorithm].name, err)
		}
	}
	if len(missing) == 0 {
		return nil
	}

	// The ops answered NOSCRIPT did not run, so they are safe to send
	// again; EVAL cannot answer NOSCRIPT and loads the script as it runs.
	r.log.Debug("scripts missing on the server, sending ops with EVAL", zap.Int(logKeyOps, len(missing)))
	pipe = r.client.Pipeline()
	for _, i := range missing {
		cmds[i] = r.eval(ctx, pipe, &ops[i], false)
	}
	_, _ = pipe.Exec(ctx)
	for _, i := range missing {
		if err := readResult(cmds[i], results[i:i+1]); err != nil {
			return unavailable("take "+r.scripts[ops[i].Algorithm].name, err)
		}
	}
	return nil
}

// eval queues op's script on pipe, by digest or by source.
func (r *Redis) eval(ctx context.Context, pipe redis.Pipeliner, op *limiter.Op, bySHA bool) *redis.Cmd {
	s := &r.scripts[op.Algorithm]
	keys := []string{op.Key}
	var args []any
	if op.Algorithm == descriptors.TokenBucket {
		args = []any{op.Burst, op.RateNum, op.RateDen, op.Window, op.Cost, op.Now}
	} else {
		args = []any{op.Limit, op.Window, op.Cost, op.Now}
	}
	if bySHA {
		return pipe.EvalSha(ctx, s.sha, keys, args...)
	}
	return pipe.Eval(ctx, s.src, keys, args...)
}

// readResult parses a script's reply into res, a slice of one result.
func readResult(cmd *redis.Cmd, res []limiter.Result) error {
	v, err := cmd.Int64Slice()
	if err != nil {
		return err
	}
	return decodeResults(v, res)
}

// decodeResults fills results from a script's reply of 4 integers per op
// {allowed, remaining, retry_after, reset}, the reply of every script here.
func decodeResults(v []int64, results []limiter.Result) error {
	if len(v) != 4*len(results) {
		return fmt.Errorf("script replied %d values for %d ops, want 4 each", len(v), len(results))
	}
	for i := range results {
		w := v[4*i : 4*i+4]
		results[i] = limiter.Result{Allowed: w[0] == 1, Remaining: w[1], RetryAfter: w[2], Reset: w[3]}
	}
	return nil
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
