package main

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// window is every row's window (or a bucket's refill period), ms: an
// hour, so that the store's guess of a fixed window, made when a row is
// recorded, is still Redis' window when it is replayed.
const window = 3_600_000

// streams are a row's commands in RESP: base, then measured; the row
// costs what base plus measured costs less what base alone does.
type streams struct {
	base, measured []byte
	funcs          []string // the functions of the row's commands
	hour           int64    // when recorded, Unix hours: a replay in another is void
}

// algorithms are the ops of -algs: limits of 4e9 requests an hour that
// never deny, cost 1 request, at Redis TIME.
var algorithms = map[string]limiter.Op{
	"fixed":   {Algorithm: descriptors.FixedWindow, Limit: 4e12, Window: window, Cost: 1000},
	"sliding": {Algorithm: descriptors.SlidingWindow, Limit: 4e12, Window: window, Cost: 1000},
	// 4e12 milli-tokens an hour: 1e7/9 a ms.
	"bucket": {Algorithm: descriptors.TokenBucket, Burst: 4e12, RateNum: 10_000_000, RateDen: 9, Window: window, Cost: 1000},
}

// recorder records what pkg/store sends, on a redis-server of its own.
type recorder struct {
	o      *options
	proc   *exec.Cmd
	client *redis.Client
	hook   *hook
}

// startRecorder starts the recording redis-server and a client on it.
func startRecorder(ctx context.Context, o *options) (*recorder, error) {
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "callgrind-record-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.server, err)
	}
	h := &hook{}
	client := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), MaxRetries: -1, ContextTimeoutEnabled: true})
	client.AddHook(h)
	r := &recorder{o: o, proc: cmd, client: client, hook: h}
	if err := wait.Until(ctx, 20*time.Second, func() error { return client.Ping(ctx).Err() }); err != nil {
		r.stop()
		return nil, fmt.Errorf("recording redis-server: %w", err)
	}
	return r, nil
}

func (r *recorder) stop() {
	_ = r.client.Close()
	_ = r.proc.Process.Kill()
	_ = r.proc.Wait()
}

// take records the calls of a take row: o.calls Takes of n ops of alg,
// keys drawn from o.ids identifiers, after the same calls once when
// existing.
func (r *recorder) take(ctx context.Context, alg string, n int, existing bool) (*streams, error) {
	if err := r.client.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	s := store.NewRedis(r.client, nil, store.RedisOptions{})
	defer s.Close()
	calls := r.draw(n)
	st := &streams{funcs: scriptFuncs, hour: time.Now().Unix() / 3600}
	r.hook.start()
	if err := s.Load(ctx); err != nil {
		return nil, err
	}
	results := make([]limiter.Result, n)
	pass := func() error {
		for _, ids := range calls {
			ops := make([]limiter.Op, n)
			for i, id := range ids {
				ops[i] = algorithms[alg]
				ops[i].Key = key(id)
			}
			if err := s.Take(ctx, ops, results); err != nil {
				return err
			}
		}
		return nil
	}
	if existing {
		if err := pass(); err != nil {
			return nil, err
		}
	}
	st.base = r.hook.cut()
	if err := pass(); err != nil {
		return nil, err
	}
	st.measured = r.hook.cut()
	return st, nil
}

// plainScript is the least a script can do for a fixed window's decision
// at Redis TIME: the yardstick for take.lua's cost per call.
const plainScript = `local t = redis.call('TIME')
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
if v == tonumber(ARGV[1]) then
  redis.call('PEXPIREAT', KEYS[1], ARGV[2])
end
return v
`

// plain returns the streams of the plain script's row: one decision a
// call, on the keys of take's one-decision rows.
func (r *recorder) plain(existing bool) *streams {
	sum := sha1.Sum([]byte(plainScript))
	sha := hex.EncodeToString(sum[:])
	start := time.Now().UnixMilli() / window * window
	return r.generate(existing, scriptFuncs, func(b *bytes.Buffer) {
		writeCommand(b, "SCRIPT", "LOAD", plainScript)
	}, func(b *bytes.Buffer, id int) {
		writeCommand(b, "EVALSHA", sha, 1, key(id)+strconv.FormatInt(start/1000, 10), 1000, start+window)
	})
}

// reference returns the streams of the reference's row: INCRBY and
// EXPIRE of each decision's key (envoyproxy/ratelimit's commands, its key
// layout), as it pipelines them for one request.
func (r *recorder) reference(existing bool) *streams {
	start := time.Now().Unix() / (window / 1000) * (window / 1000)
	return r.generate(existing, referenceFuncs, func(*bytes.Buffer) {}, func(b *bytes.Buffer, id int) {
		k := "bench_user_user-" + strconv.Itoa(id) + "_" + strconv.FormatInt(start, 10)
		writeCommand(b, "INCRBY", k, 1)
		writeCommand(b, "EXPIRE", k, window/1000)
	})
}

// generate returns the streams of setup, then one decision a call on the
// keys of take's one-decision rows (twice when existing).
func (r *recorder) generate(existing bool, funcs []string, setup func(*bytes.Buffer), decide func(b *bytes.Buffer, id int)) *streams {
	st := &streams{funcs: funcs, hour: time.Now().Unix() / 3600}
	var b bytes.Buffer
	setup(&b)
	calls := r.draw(1)
	if existing {
		for _, ids := range calls {
			decide(&b, ids[0])
		}
	}
	st.base = bytes.Clone(b.Bytes())
	b.Reset()
	for _, ids := range calls {
		decide(&b, ids[0])
	}
	st.measured = b.Bytes()
	return st
}

// draw returns the identifiers of o.calls calls of n decisions, drawn
// from o.ids: the same for every row of n decisions.
func (r *recorder) draw(n int) [][]int {
	rng := rand.New(rand.NewPCG(1, 2))
	calls := make([][]int, r.o.calls)
	for c := range calls {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = rng.IntN(r.o.ids)
		}
		calls[c] = ids
	}
	return calls
}

// key is the base key of identifier i, as pkg/limiter builds one.
func key(i int) string { return "ratelimit:{bench/user=user-" + strconv.Itoa(i) + "}:default:" }

// hook records the commands a client sends, in RESP.
type hook struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd.Args())
		return next(ctx, cmd)
	}
}

func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.add(c.Args())
		}
		return next(ctx, cmds)
	}
}

// recorded are the commands a hook records: the store's script calls
// and loads, not a connection's handshake.
var recorded = map[string]bool{"evalsha": true, "eval": true, "script": true}

func (h *hook) add(args []any) {
	if name, _ := args[0].(string); !recorded[strings.ToLower(name)] {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	writeCommand(&h.buf, args...)
}

// start forgets what was recorded so far.
func (h *hook) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
}

// cut returns what was recorded since the last start or cut.
func (h *hook) cut() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := bytes.Clone(h.buf.Bytes())
	h.buf.Reset()
	return b
}

// writeCommand appends one command in RESP.
func writeCommand(b *bytes.Buffer, args ...any) {
	fmt.Fprintf(b, "*%d\r\n", len(args))
	for _, a := range args {
		var s string
		switch v := a.(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		case int64:
			s = strconv.FormatInt(v, 10)
		case int:
			s = strconv.Itoa(v)
		default:
			s = fmt.Sprint(v)
		}
		fmt.Fprintf(b, "$%d\r\n%s\r\n", len(s), s)
	}
}
