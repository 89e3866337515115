package store

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastlimit/fastlimit/lua"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// ErrReplyMismatch marks a script reply without its call's tag, or of the
// wrong shape: the connection's replies have drifted from its calls. The
// call fails, and go-redis closes the connection.
var ErrReplyMismatch = errors.New("reply does not match its call")

// script is a Lua script and the digest EVALSHA names it by.
type script struct {
	name, src, sha string
}

// spread reports whether s is take.lua's cross-slot variant (keys in ARGV).
func (s script) spread() bool { return s.sha == takeCrossScript.sha }

func newScript(name, src string) script {
	sum := sha1.Sum([]byte(src))
	return script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

// The scripts the Redis stores run.
var (
	takeScript      = newScript("take", lua.Take)
	takeCrossScript = newScript("take (cross-slot)", lua.TakeCrossSlot)
	atomicScript    = newScript("atomic", lua.Atomic)
)

// maxBatchOps caps the ops of one take.lua call (its map has a byte an op).
const maxBatchOps = 255

// atomicArgs is the number of ARGV entries per op of lua/atomic.lua.
const atomicArgs = 8

// tags numbers script calls, from a random point below 2^40, below 2^53.
var tags atomic.Int64

func init() {
	var b [8]byte
	_, _ = rand.Read(b[:])
	tags.Store(int64(binary.LittleEndian.Uint64(b[:]) >> 24))
}

// nextTag returns a fresh tag.
func nextTag() int64 {
	return tags.Add(1) & (1<<53 - 1)
}

// argWriter receives a command's arguments in order.
type argWriter interface {
	String(s string)
	Bytes(p []byte)
	Int(v int64)
}

// takeChunk is the ops [from, to) of one take.lua call, and its tag.
type takeChunk struct {
	from, to int
	tag      int64
}

// maxSendChunks is how many calls a send splits into without allocating.
const maxSendChunks = 8

// sameParams reports whether two ops send the same parameters to take.lua.
func sameParams(a, b *limiter.Op) bool {
	return a.Algorithm == b.Algorithm && a.Now == b.Now && a.Limit == b.Limit && a.Window == b.Window &&
		a.Cost == b.Cost && a.Refund == b.Refund && a.Burst == b.Burst && a.RateNum == b.RateNum && a.RateDen == b.RateDen
}

// refunds reports whether op gives back: a refund of Cost 0 is a peek.
func refunds(op *limiter.Op) bool { return op.Refund && op.Cost > 0 }

// scriptCost is the cost the scripts take: a refund's negated.
func scriptCost(op *limiter.Op) int64 {
	if op.Refund {
		return -op.Cost
	}
	return op.Cost
}

// splitChunks appends to dst the calls that carry ops, maxBatchOps each.
func splitChunks(ops []limiter.Op, dst []takeChunk) []takeChunk {
	for from := 0; from < len(ops); from += maxBatchOps {
		dst = append(dst, takeChunk{from: from, to: min(from+maxBatchOps, len(ops))})
	}
	return dst
}

// takeEncoder writes take.lua calls, reusing its buffers; it is not safe
// for concurrent use.
type takeEncoder struct {
	sets  []int    // the first op of each parameter set
	guess []string // each set's window start guess (fixed windows)
	mapb  []byte   // each op's set, 1-based
	runs  []byte   // ops per group: a run of ops with one key
	first []int    // the first op of each group
	clock int64    // this process' clock, Unix ms, read once a call
}

// bucketTail is take.lua's BUCKET, a token bucket's key suffix.
const bucketTail = "tokens"

// plan finds the parameter sets and groups (runs of one key) of ops, at most
// maxBatchOps, and returns the call's argument count after name and digest.
func (e *takeEncoder) plan(ops []limiter.Op) int {
	e.sets, e.guess, e.mapb, e.runs, e.first = e.sets[:0], e.guess[:0], e.mapb[:0], e.runs[:0], e.first[:0]
	e.clock = 0
	n := 4 // numkeys, tag, map, groups
	for i := range ops {
		if i == 0 || ops[i].Key != ops[i-1].Key {
			e.runs = append(e.runs, 0)
			e.first = append(e.first, i)
			n++ // the group's key
		}
		e.runs[len(e.runs)-1]++
		k := 0
		for k < len(e.sets) && !sameParams(&ops[e.sets[k]], &ops[i]) {
			k++
		}
		if k == len(e.sets) {
			e.sets = append(e.sets, i)
			e.guess = append(e.guess, "")
			switch ops[i].Algorithm {
			case descriptors.TokenBucket:
				n += 7
			case descriptors.FixedWindow:
				e.guess[k] = e.windowGuess(&ops[i])
				n += 6
			default:
				n += 5
			}
		}
		e.mapb = append(e.mapb, byte(k+1))
	}
	return n
}

// windowGuess returns take.lua's guess: the start (Unix seconds) of op's
// fixed window by its Now, or this process' clock.
func (e *takeEncoder) windowGuess(op *limiter.Op) string {
	now := op.Now
	if now == 0 {
		if e.clock == 0 {
			e.clock = guessClock()
		}
		now = e.clock
	}
	return strconv.FormatInt((now-now%op.Window)/1000, 10)
}

// guessClock is the clock of windowGuess, Unix ms; tests set it wrong.
var guessClock = func() int64 { return time.Now().UnixMilli() }

// groupKey returns the KEYS entry of the group starting at ops[i]: the base
// key, then the window guess (fixed window) or bucketTail.
func (e *takeEncoder) groupKey(ops []limiter.Op, i int) string {
	switch ops[i].Algorithm {
	case descriptors.FixedWindow:
		return ops[i].Key + e.guess[e.mapb[i]-1]
	case descriptors.TokenBucket:
		return ops[i].Key + bucketTail
	}
	return ops[i].Key
}

// write writes the arguments plan counted, as take.lua's header lays them
// out (with spread, numkeys 0 and the keys after the groups).
func (e *takeEncoder) write(w argWriter, tag int64, ops []limiter.Op, spread bool) {
	if spread {
		w.Int(0)
		w.Int(tag)
		w.Bytes(e.mapb)
		w.Bytes(e.runs)
	} else {
		w.Int(int64(len(e.first)))
	}
	for _, i := range e.first {
		w.String(e.groupKey(ops, i))
	}
	if !spread {
		w.Int(tag)
		w.Bytes(e.mapb)
		w.Bytes(e.runs)
	}
	for k, i := range e.sets {
		op := &ops[i]
		w.Int(int64(op.Algorithm))
		w.Int(op.Now)
		if op.Algorithm == descriptors.TokenBucket {
			w.Int(op.Burst)
			w.Int(op.RateNum)
			w.Int(op.RateDen)
		} else {
			w.Int(op.Limit)
		}
		w.Int(op.Window)
		w.Int(scriptCost(op))
		if op.Algorithm == descriptors.FixedWindow {
			w.String(e.guess[k])
		}
	}
}

// decodeTake fills results from take.lua's reply (its header gives the
// shape), deriving each answer. An op left undecided (-1) is appended to
// moved; with moved nil (keys declared) it is ErrReplyMismatch, as is any
// reply of another shape.
func decodeTake(v []int64, tag int64, ops []limiter.Op, results []limiter.Result, moved *[]int) error {
	if len(v) < 2 || v[0] != tag {
		return mismatch(v, tag)
	}
	short := func() error {
		return fmt.Errorf("%w: take.lua replied %d values for %d ops", ErrReplyMismatch, len(v), len(ops))
	}
	clock, i := v[1], 2
	var count int64 // the last fixed window op's count
	for k := range ops {
		op := &ops[k]
		if op.Algorithm != descriptors.TokenBucket && op.Now == 0 && clock <= 0 {
			return short()
		}
		if op.Algorithm == descriptors.FixedWindow && k > 0 && op.Key == ops[k-1].Key && sameParams(op, &ops[k-1]) {
			// No value of its own: the op before's, plus its cost.
			switch {
			case count == notDecided:
			case refunds(op):
				count = max(count-min(op.Cost, maxCost), 0)
			default:
				count = min(count+min(op.Cost, maxCost), maxCost)
			}
		} else {
			if i >= len(v) {
				return short()
			}
			count = v[i]
			i++
		}
		if count == notDecided {
			if moved == nil {
				return fmt.Errorf("%w: take.lua left op %d undecided in a call that declared its keys", ErrReplyMismatch, k)
			}
			*moved = append(*moved, k)
			continue
		}
		switch op.Algorithm {
		case descriptors.FixedWindow:
			results[k] = fixedResult(op, count, clock)
		case descriptors.SlidingWindow:
			w, retry := count, int64(0)
			if !refunds(op) && w+min(op.Cost, maxCost) > op.Limit {
				if i >= len(v) {
					return short()
				}
				retry = v[i]
				i++
			}
			results[k] = slidingResult(op, w, retry, clock)
		case descriptors.TokenBucket:
			results[k] = bucketResult(op, count)
		}
	}
	if i != len(v) {
		return short()
	}
	return nil
}

// notDecided is take.lua's reply for an op whose key the node does not serve.
const notDecided = -1

// fixedResult derives a fixed-window answer from the count after the op.
func fixedResult(op *limiter.Op, count, clock int64) limiter.Result {
	now := op.Now
	if now == 0 {
		now = clock
	}
	reset := op.Window - now%op.Window
	if refunds(op) {
		return limiter.Result{Allowed: true, Remaining: max(op.Limit-count, 0), Reset: reset}
	}
	if count <= op.Limit {
		return limiter.Result{Allowed: true, Remaining: op.Limit - count, Reset: reset}
	}
	return limiter.Result{RetryAfter: reset, Reset: reset}
}

// slidingResult derives a sliding-window answer from the weighted count w
// it was decided on (a refund's: after it) and, if denied, retry.
func slidingResult(op *limiter.Op, w, retry, clock int64) limiter.Result {
	now := op.Now
	if now == 0 {
		now = clock
	}
	reset := op.Window - now%op.Window
	if refunds(op) { // w is the weighted count after the refund
		return limiter.Result{Allowed: true, Remaining: max(op.Limit-w, 0), Reset: reset}
	}
	cost := min(op.Cost, maxCost)
	if w+cost <= op.Limit {
		return limiter.Result{Allowed: true, Remaining: op.Limit - w - cost, Reset: reset}
	}
	return limiter.Result{Remaining: max(op.Limit-w, 0), RetryAfter: retry, Reset: reset}
}

// bucketResult derives a token-bucket answer from take.lua's t*den + c
// (allowed) or -(t*den + c) - 2 (denied).
func bucketResult(op *limiter.Op, x int64) limiter.Result {
	allowed := x >= 0
	if !allowed {
		x = -x - 2
	}
	return bucketAnswer(op, allowed, x/op.RateDen, x%op.RateDen)
}

// bucketAnswer is a token-bucket answer from t milli-tokens and carry c
// left after the op, for Memory and Redis alike.
func bucketAnswer(op *limiter.Op, allowed bool, t, c int64) limiter.Result {
	burst, num, den := op.Burst, op.RateNum, op.RateDen
	r := limiter.Result{Allowed: allowed, Remaining: t}
	if t < burst {
		r.Reset = ceilDiv((burst-t)*den-c, num)
	}
	if !allowed {
		r.RetryAfter = op.Window
		if cost := min(op.Cost, maxCost); cost <= burst {
			r.RetryAfter = ceilDiv((cost-t)*den-c, num)
		}
	}
	return r
}

func mismatch(v []int64, tag int64) error {
	got := "none"
	if len(v) > 0 {
		got = fmt.Sprint(v[0])
	}
	return fmt.Errorf("%w: tag %s, want %d", ErrReplyMismatch, got, tag)
}

// writeAtomic writes an atomic.lua call's arguments after digest or source.
func writeAtomic(w argWriter, tag int64, ops []limiter.Op) {
	w.Int(int64(len(ops)))
	for i := range ops {
		w.String(ops[i].Key)
	}
	w.Int(tag)
	w.Int(ops[0].Now)
	for i := range ops {
		op := &ops[i]
		w.Int(int64(op.Algorithm))
		w.Int(op.Limit)
		w.Int(op.Window)
		w.Int(scriptCost(op))
		w.Int(op.Burst)
		w.Int(op.RateNum)
		w.Int(op.RateDen)
		w.Int(int64(op.Veto))
	}
}

// decodeTagged fills results from atomic.lua's {tag, 4 integers an op}.
func decodeTagged(v []int64, tag int64, results []limiter.Result) error {
	if len(v) == 0 || v[0] != tag {
		return mismatch(v, tag)
	}
	return decodeResults(v[1:], results)
}

// decodeResults fills results from {allowed, remaining, retry_after, reset}s.
func decodeResults(v []int64, results []limiter.Result) error {
	if len(v) != 4*len(results) {
		return fmt.Errorf("%w: script replied %d values for %d ops, want 4 each", ErrReplyMismatch, len(v), len(results))
	}
	for i := range results {
		w := v[4*i : 4*i+4]
		results[i] = limiter.Result{Allowed: w[0] == 1, Remaining: w[1], RetryAfter: w[2], Reset: w[3]}
	}
	return nil
}

// anyArgs collects arguments for go-redis.
type anyArgs []any

func (a *anyArgs) String(s string) { *a = append(*a, s) }
func (a *anyArgs) Bytes(p []byte)  { *a = append(*a, string(p)) }
func (a *anyArgs) Int(v int64)     { *a = append(*a, v) }

// encoders pools takeEncoders, so that a send reuses their buffers.
var encoders = sync.Pool{New: func() any { return new(takeEncoder) }}
