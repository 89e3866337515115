package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1, ContextTimeoutEnabled: true})
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

// cost is what a row's measured calls cost, instructions a call: in the
// functions that run commands (EVALSHA's, or INCRBY's and EXPIRE's: the
// time INFO commandstats reports), of which in the commands a script
// runs (redis.call), and in the whole server (reading, parsing and
// replying included). -1: the profile does not name the function.
type cost struct {
	command, inner, total int64
	allocs                int64 // calls into the allocator (allocFuncs), the whole server's
}

// The redis-server functions that run the rows' commands (a script's
// redis.calls run in them, and in scriptFunc).
var (
	scriptFuncs    = []string{"evalShaCommand", "evalCommand"}
	referenceFuncs = []string{"incrbyCommand", "expireCommand"}
	scriptFunc     = "scriptCall"
	// allocFuncs allocate: Lua's allocator calls realloc, Redis' zmalloc
	// malloc, calloc and realloc (Debian's redis-server links jemalloc
	// under these names). free is not counted.
	allocFuncs = map[string]bool{"malloc": true, "calloc": true, "realloc": true}
)

// count profiles base and base followed by measured, and returns the
// difference over o.calls calls.
func count(ctx context.Context, o *options, s *streams, name string) (cost, error) {
	keep, keepBase := "", ""
	if o.keep != "" {
		keep = filepath.Join(o.keep, name+".callgrind")
		keepBase = filepath.Join(o.keep, name+".base.callgrind")
	}
	base, err := profile(ctx, o, s.base, s.funcs, keepBase)
	if err != nil {
		return cost{}, err
	}
	all, err := profile(ctx, o, append(bytes.Clone(s.base), s.measured...), s.funcs, keep)
	if err != nil {
		return cost{}, err
	}
	if time.Now().Unix()/3600 != s.hour {
		return cost{}, errors.New("the hour turned between recording and replay (the store's window guesses are stale): run again")
	}
	n := int64(o.calls)
	c := cost{total: (all.total - base.total) / n, command: -1, inner: -1, allocs: (all.allocs - base.allocs) / n}
	if all.command >= 0 {
		c.command = (all.command - max(base.command, 0)) / n
	}
	if all.inner >= 0 {
		c.inner = (all.inner - max(base.inner, 0)) / n
	}
	return c, nil
}

// profile feeds stream to a redis-server under callgrind and returns its
// instructions, whole and in funcs; keep, if set, is where the profile
// goes.
func profile(ctx context.Context, o *options, stream []byte, funcs []string, keep string) (cost, error) {
	dir, err := os.MkdirTemp("", "callgrind-")
	if err != nil {
		return cost{}, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "callgrind.out")
	if keep != "" {
		out = keep
	}
	port, err := loopback.FreePort()
	if err != nil {
		return cost{}, err
	}
	p := strconv.Itoa(port)
	var log bytes.Buffer
	vg := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+out,
		o.server, "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	vg.Stdout, vg.Stderr = &log, &log
	if err := vg.Start(); err != nil {
		return cost{}, fmt.Errorf("start valgrind (Debian: apt-get install valgrind): %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- vg.Wait() }()
	cli := func(stdin io.Reader, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, o.cli, append([]string{"-h", "127.0.0.1", "-p", p}, args...)...)
		cmd.Stdin = stdin
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	err = wait.Until(ctx, 60*time.Second, func() error {
		out, err := cli(nil, "PING")
		if err == nil && strings.TrimSpace(out) != "PONG" {
			err = errors.New(out)
		}
		return err
	})
	if err == nil {
		var res string
		res, perr := cli(bytes.NewReader(stream), "--pipe")
		if perr != nil || !strings.Contains(res, "errors: 0,") {
			err = fmt.Errorf("redis-cli --pipe: %v: %s", perr, strings.TrimSpace(res))
		}
	}
	_, _ = cli(nil, "SHUTDOWN", "NOSAVE")
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		_ = vg.Process.Kill()
		<-exited
	}
	if err != nil {
		return cost{}, fmt.Errorf("%w\n%s", err, log.String())
	}
	f, err := os.Open(out)
	if err != nil {
		return cost{}, err
	}
	defer f.Close()
	total, incl, allocs, err := parseProfile(f)
	if err != nil {
		return cost{}, fmt.Errorf("%s: %w", out, err)
	}
	c := cost{total: total, command: -1, inner: -1, allocs: allocs}
	for _, name := range funcs {
		if v, ok := incl[name]; ok {
			c.command = max(c.command, 0) + v
		}
	}
	if v, ok := incl[scriptFunc]; ok {
		c.inner = v
	}
	return c, nil
}

// parseProfile reads a callgrind profile (one event, Ir; positions by
// line): its total, the inclusive cost of each named function, summed
// over the calls into it from other functions (callgrind_annotate's
// inclusive figures count some cycles twice), and the calls into
// allocFuncs.
func parseProfile(r io.Reader) (total int64, incl map[string]int64, allocs int64, err error) {
	names := map[string]string{} // "(id)" -> name
	name := func(ref string) string {
		id, rest, _ := strings.Cut(ref, " ")
		if rest != "" {
			names[id] = rest
			return rest
		}
		return names[id]
	}
	incl = map[string]int64{}
	var fn, callee string
	afterCalls := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "fn="):
			fn = name(line[3:])
		case strings.HasPrefix(line, "cfn="):
			callee = name(line[4:])
		case strings.HasPrefix(line, "calls="):
			afterCalls = true
			if allocFuncs[callee] {
				n, err := strconv.ParseInt(strings.Fields(line[6:])[0], 10, 64)
				if err != nil {
					return 0, nil, 0, fmt.Errorf("%w: %q", errProfile, line)
				}
				allocs += n
			}
		case afterCalls:
			afterCalls = false
			f := strings.Fields(line)
			if len(f) < 2 {
				return 0, nil, 0, fmt.Errorf("%w: call cost %q", errProfile, line)
			}
			v, err := strconv.ParseInt(f[len(f)-1], 10, 64)
			if err != nil {
				return 0, nil, 0, fmt.Errorf("%w: call cost %q", errProfile, line)
			}
			if callee != fn {
				incl[callee] += v
			}
		case strings.HasPrefix(line, "totals:"), strings.HasPrefix(line, "summary:"):
			v, err := strconv.ParseInt(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), 10, 64)
			if err != nil {
				return 0, nil, 0, fmt.Errorf("%w: %q", errProfile, line)
			}
			total = v
		}
	}
	if err := sc.Err(); err != nil {
		return 0, nil, 0, err
	}
	if total == 0 {
		return 0, nil, 0, fmt.Errorf("%w: no total", errProfile)
	}
	return total, incl, allocs, nil
}

// errProfile marks a callgrind profile that does not parse.
var errProfile = errors.New("callgrind profile")

// row is one line of the table: a shape and what it cost.
type row struct {
	what      string
	decisions int // a call
	cost      cost
}

// measure counts every row and prints the table; SIGINT or SIGTERM stop
// it.
func measure(o *options, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.memory {
		return measureMemory(ctx, o, stdout, stderr)
	}
	rec, err := startRecorder(ctx, o)
	if err != nil {
		return err
	}
	defer rec.stop()
	var rows []row
	add := func(what string, decisions int, s *streams) error {
		fmt.Fprintf(stderr, "callgrind: %s\n", what)
		c, err := count(ctx, o, s, strings.NewReplacer(" ", "-", ",", "").Replace(what))
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		rows = append(rows, row{what: what, decisions: decisions, cost: c})
		return nil
	}
	start := time.Now()
	for _, alg := range o.algs {
		for _, keys := range o.keys {
			for _, n := range o.ops {
				s, err := rec.take(ctx, alg, n, keys == "existing")
				if err != nil {
					return err
				}
				if err := add(fmt.Sprintf("take, %s, %s a call, %s keys", alg, plural(n, "decision"), keys), n, s); err != nil {
					return err
				}
			}
		}
	}
	if o.refs {
		for _, keys := range o.keys {
			existing := keys == "existing"
			if err := add("plain script (TIME, INCRBY, PEXPIREAT when new), "+keys+" keys", 1, rec.plain(existing)); err != nil {
				return err
			}
			if err := add("reference (INCRBY, EXPIRE), "+keys+" keys", 1, rec.reference(existing)); err != nil {
				return err
			}
		}
	}
	printTable(stdout, o, rows, time.Since(start))
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// printTable writes the rows as markdown.
func printTable(w io.Writer, o *options, rows []row, took time.Duration) {
	fmt.Fprintf(w, "`go run ./bench/callgrind%s`: %d calls a row, keys drawn from %d identifiers, windows of an hour, limits that never deny, %s.\n\n",
		quoteArgs(o.args), o.calls, o.ids, took.Round(time.Second))
	fmt.Fprintln(w, "| call | command, a call | of which redis.call | server, a call | server, a decision | allocations, a decision |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
	for _, r := range rows {
		c := r.cost
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.1f |\n", r.what, thousands(c.command), thousands(c.inner), thousands(c.total),
			thousands(c.total/int64(r.decisions)), float64(c.allocs)/float64(r.decisions))
	}
}
