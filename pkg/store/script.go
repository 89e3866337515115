package store

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	args           [2]any // "evalsha", sha and "eval", src, boxed once
}

// spread reports whether s is take.lua's cross-slot variant (keys in ARGV).
func (s *script) spread() bool { return s == takeCrossScript }

func newScript(name, src string) *script {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &script{name: name, src: src, sha: sha, args: [2]any{sha, src}}
}

// The scripts the Redis stores run.
var (
	takeScript      = newScript("take", lua.Take)
	takeCrossScript = newScript("take (cross-slot)", lua.TakeCrossSlot)
	fixedScript     = newScript("fixed", lua.Fixed)
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

// sameParams reports whether two ops send the same parameters to take.lua
// (a fixed window's limit is not sent).
func sameParams(a, b *limiter.Op) bool {
	if a.Algorithm != b.Algorithm || a.Now != b.Now || a.Window != b.Window || a.Cost != b.Cost || a.Refund != b.Refund ||
		a.Debit != b.Debit || a.Calendar != b.Calendar {
		return false
	}
	switch a.Algorithm {
	case descriptors.FixedWindow:
		return true
	case descriptors.SlidingWindow:
		return a.Limit == b.Limit
	}
	return a.Burst == b.Burst && a.RateNum == b.RateNum && a.RateDen == b.RateDen
}

// refunds reports whether op gives back: a refund of Cost 0 is a peek.
func refunds(op *limiter.Op) bool { return op.Refund && op.Cost > 0 }

// scriptCost is the cost the scripts take: at most 2^52, a refund's negated.
func scriptCost(op *limiter.Op) int64 {
	if op.Refund {
		return -min(op.Cost, maxCost)
	}
	return min(op.Cost, maxCost)
}

// splitChunks appends to dst the calls that carry ops, maxBatchOps each.
func splitChunks(ops []limiter.Op, dst []takeChunk) []takeChunk {
	for from := 0; from < len(ops); from += maxBatchOps {
		dst = append(dst, takeChunk{from: from, to: min(from+maxBatchOps, len(ops))})
	}
	return dst
}

// takeEncoder writes take.lua and fixed.lua calls, reusing its buffers; it
// is not safe for concurrent use.
type takeEncoder struct {
	script *script // the call's: plan's choice
	sets   []int   // the first op of each parameter set
	// starts holds setStrings strings a set: a fixed window's start S, end
	// E and expiry X; a calendar's B0 to B5 (take.lua's header)
	starts []string
	mapb   []byte // each op's set, 1-based
	runs   []byte // ops per group: a run of ops with one key
	first  []int  // the first op of each group
	clock  int64  // this process' clock, Unix ms, read once a call
	// windows and periods keep the strings of the last windows written,
	// which the calls that follow share (until their window ends).
	windows [4]windowStrings
	next    int // the entry of windows to replace
	periods [2]periodStrings
}

// setStrings is the room for each set's strings in takeEncoder.starts.
const setStrings = 6

// windowStrings are a fixed window's start, end and expiry as take.lua and
// fixed.lua take them.
type windowStrings struct {
	window, start int64 // ms
	s, e, x       string
}

// periodStrings are the starts around a calendar's period, as take.lua
// takes them (B0 to B5, Unix seconds), and the period's bounds, ms.
type periodStrings struct {
	cal        *descriptors.Calendar
	start, end int64
	b          [setStrings]string
}

// kind is the first parameter of op's set in take.lua and atomic.lua: its
// algorithm, plus 3 when it is charged always, plus 6 on a calendar's
// windows.
func kind(op *limiter.Op) int64 {
	k := int64(op.Algorithm)
	if op.Debit {
		k += 3
	}
	if op.Calendar != nil {
		k += 6
	}
	return k
}

// bucketTail is take.lua's BUCKET, a token bucket's key suffix.
const bucketTail = "tokens"

// leanRepeats is how many more ops than keys a fixed.lua call may carry:
// it costs Redis an INCRBY an op, take.lua one a key, but take.lua's
// groups cost more to set up (docs/redis.md has the counts).
const leanRepeats = 10

// plan prepares a call of ops (at most maxBatchOps, each key's together)
// to s, take.lua or its cross-slot variant, and returns its argument count
// after name and digest. The call goes to e.script: s, or fixed.lua when
// the ops are fixed-window charges it decides (its keys declared: in
// cross-slot mode, a call of one op).
func (e *takeEncoder) plan(ops []limiter.Op, s *script) int {
	e.sets, e.starts, e.mapb, e.runs, e.first = e.sets[:0], e.starts[:0], e.mapb[:0], e.runs[:0], e.first[:0]
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
			op := &ops[i]
			switch {
			case op.Calendar != nil:
				p := e.period(op)
				e.starts = append(e.starts, p.b[:]...)
				n += 3 + setStrings // kind, now, cost or limit, B0..B5
				if op.Algorithm == descriptors.SlidingWindow {
					n++ // cost and limit
				}
			case op.Algorithm == descriptors.TokenBucket:
				e.starts = append(e.starts, "", "", "", "", "", "")
				n += 7
			case op.Algorithm == descriptors.FixedWindow:
				w := e.window(op)
				e.starts = append(e.starts, w.s, w.e, w.x, "", "", "")
				n += 6
			default:
				e.starts = append(e.starts, "", "", "", "", "", "")
				n += 5
			}
		}
		e.mapb = append(e.mapb, byte(k+1))
	}
	e.script = s
	if e.lean(ops, s.spread()) {
		e.script = fixedScript
		n = 1 + len(ops) + 4 // numkeys, a key an op, tag, cost, S, E
		if ops[0].Now != 0 {
			n++ // now
		}
		return n
	}
	return n
}

// lean reports whether fixed.lua decides ops, as planned: one parameter
// set of fixed-window charges, at most leanRepeats ops more than keys,
// keys that a call may declare.
func (e *takeEncoder) lean(ops []limiter.Op, spread bool) bool {
	op := &ops[0]
	return len(e.sets) == 1 && op.Algorithm == descriptors.FixedWindow && op.Calendar == nil && !op.Refund && op.Cost > 0 &&
		len(ops)-len(e.runs) <= leanRepeats && (!spread || len(ops) == 1)
}

// window returns the strings of op's fixed window by its Now, or by this
// process' clock (take.lua's and fixed.lua's guess): its start S and end E,
// Unix seconds, and E in ms.
func (e *takeEncoder) window(op *limiter.Op) *windowStrings {
	now := op.Now
	if now == 0 {
		if e.clock == 0 {
			e.clock = guessClock()
		}
		now = e.clock
	}
	start := now - now%op.Window
	for i := range e.windows {
		if w := &e.windows[i]; w.window == op.Window && w.start == start && w.s != "" {
			return w
		}
	}
	w := &e.windows[e.next]
	e.next = (e.next + 1) % len(e.windows)
	end := start + op.Window
	*w = windowStrings{window: op.Window, start: start, s: strconv.FormatInt(start/1000, 10),
		e: strconv.FormatInt(end/1000, 10), x: strconv.FormatInt(end, 10)}
	return w
}

// period returns the strings of op's calendar period by its Now, or by
// this process' clock (take.lua's guess): B0 to B5, the starts of the two
// periods before, the period's start and end, and the ends of the two
// after.
func (e *takeEncoder) period(op *limiter.Op) *periodStrings {
	now := op.Now
	if now == 0 {
		if e.clock == 0 {
			e.clock = guessClock()
		}
		now = e.clock
	}
	for i := range e.periods {
		if p := &e.periods[i]; p.cal == op.Calendar && p.start <= now && now < p.end {
			return p
		}
	}
	p := &e.periods[0]
	if p.cal != nil {
		e.periods[1] = e.periods[0]
	}
	*p = periods(op.Calendar, now)
	return p
}

// periods returns the strings of c's period holding now (Unix ms).
func periods(c *descriptors.Calendar, now int64) periodStrings {
	start, end := c.Period(now)
	b1, _ := c.Period(start - 1)
	b0, _ := c.Period(b1 - 1)
	_, b4 := c.Period(end)
	_, b5 := c.Period(b4)
	p := periodStrings{cal: c, start: start, end: end}
	for i, ms := range [...]int64{b0, b1, start, end, b4, b5} {
		p.b[i] = strconv.FormatInt(ms/1000, 10)
	}
	return p
}

// guessClock is the clock of window's guess, Unix ms; tests set it wrong.
var guessClock = func() int64 { return time.Now().UnixMilli() }

// groupKey returns the KEYS entry of the group starting at ops[i]: the base
// key, then the window start (fixed window: S, or a calendar's B2) or
// bucketTail.
func (e *takeEncoder) groupKey(ops []limiter.Op, i int) string {
	switch op := &ops[i]; op.Algorithm {
	case descriptors.FixedWindow:
		k := setStrings * int(e.mapb[i]-1)
		if op.Calendar != nil {
			k += 2
		}
		return op.Key + e.starts[k]
	case descriptors.TokenBucket:
		return op.Key + bucketTail
	}
	return ops[i].Key
}

// write writes the arguments plan counted, as the header of e.script lays
// them out (take.lua's cross-slot mode: numkeys 0 and the keys after the
// groups).
func (e *takeEncoder) write(w argWriter, tag int64, ops []limiter.Op) {
	if e.script == fixedScript {
		op := &ops[0]
		w.Int(int64(len(ops)))
		for i := range ops {
			w.String(ops[i].Key + e.starts[0])
		}
		w.Int(tag)
		w.Int(scriptCost(op))
		w.String(e.starts[0])
		w.String(e.starts[1])
		if op.Now != 0 {
			w.Int(op.Now)
		}
		return
	}
	spread := e.script.spread()
	mapb, runs := e.mapb, e.runs
	if len(e.sets) == 1 {
		mapb = nil // every op has set 1
	}
	if len(e.runs) == len(ops) && !spread {
		runs = nil // every group has one op
	}
	if spread {
		w.Int(0)
		w.Int(tag)
		w.Bytes(mapb)
		w.Bytes(runs)
	} else {
		w.Int(int64(len(e.first)))
	}
	for _, i := range e.first {
		w.String(e.groupKey(ops, i))
	}
	if !spread {
		w.Int(tag)
		w.Bytes(mapb)
		w.Bytes(runs)
	}
	for k, i := range e.sets {
		op := &ops[i]
		w.Int(kind(op))
		w.Int(op.Now)
		strs := e.starts[setStrings*k : setStrings*(k+1)]
		switch {
		case op.Calendar != nil:
			if op.Algorithm == descriptors.SlidingWindow {
				w.Int(op.Limit)
			}
			w.Int(scriptCost(op))
			for _, b := range strs {
				w.String(b)
			}
		case op.Algorithm == descriptors.FixedWindow:
			w.Int(scriptCost(op))
			w.String(strs[0])
			w.String(strs[1])
			w.String(strs[2])
		case op.Algorithm == descriptors.TokenBucket:
			w.Int(op.Burst)
			w.Int(op.RateNum)
			w.Int(op.RateDen)
			w.Int(op.Window)
			w.Int(scriptCost(op))
		default:
			w.Int(op.Limit)
			w.Int(op.Window)
			w.Int(scriptCost(op))
		}
	}
}

// replyClock is the Redis TIME of a reply's secs and usec, Unix ms.
func replyClock(secs, usec int64) int64 { return secs*1000 + usec/1000 }

// decodeFixed fills results from fixed.lua's reply, {tag, secs, usec,
// count, ...}.
func decodeFixed(v []int64, tag int64, ops []limiter.Op, results []limiter.Result) error {
	if len(v) < 3 || v[0] != tag {
		return mismatch(v, tag)
	}
	if len(v) != 3+len(ops) || ops[0].Now == 0 && v[1] <= 0 {
		return fmt.Errorf("%w: fixed.lua replied %d values for %d ops", ErrReplyMismatch, len(v), len(ops))
	}
	clock := replyClock(v[1], v[2])
	for i := range ops {
		results[i] = fixedResult(&ops[i], v[3+i], clock)
	}
	return nil
}

// parseFixedOne reads fixed.lua's reply to a call of one op, the string
// "tag secs usec count", as the integers of its longer replies.
func parseFixedOne(s string, into *[4]int64) ([]int64, error) {
	for i := range into {
		f, rest, _ := strings.Cut(s, " ")
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || i == len(into)-1 && rest != "" {
			return nil, fmt.Errorf("%w: fixed.lua replied %.40q", ErrReplyMismatch, s)
		}
		into[i], s = n, rest
	}
	return into[:], nil
}

// decodeReply fills results from the reply v of a call to s. Ops left
// undecided go to moved (take.lua's cross-slot mode); in a call that
// declared its keys, they are ErrReplyMismatch.
func decodeReply(s *script, v []int64, tag int64, ops []limiter.Op, results []limiter.Result, moved *[]int) error {
	switch {
	case s == fixedScript:
		return decodeFixed(v, tag, ops, results)
	case !s.spread():
		moved = nil
	}
	return decodeTake(v, tag, ops, results, moved)
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
	if len(v) < 3 {
		return short()
	}
	clock, i := replyClock(v[1], v[2]), 3
	var count int64 // the last fixed window op's count
	for k := range ops {
		op := &ops[k]
		if op.Algorithm != descriptors.TokenBucket && op.Now == 0 && v[1] <= 0 {
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
	_, end := window(op, now)
	reset := end - now
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
	_, end := window(op, now)
	reset := end - now
	if refunds(op) { // w is the weighted count after the refund
		return limiter.Result{Allowed: true, Remaining: max(op.Limit-w, 0), Reset: reset}
	}
	cost := min(op.Cost, maxCost)
	if w+cost <= op.Limit {
		return limiter.Result{Allowed: true, Remaining: op.Limit - w - cost, Reset: reset}
	}
	if op.Debit { // charged all the same: nothing left
		return limiter.Result{RetryAfter: retry, Reset: reset}
	}
	return limiter.Result{Remaining: max(op.Limit-w, 0), RetryAfter: retry, Reset: reset}
}

// bucketResult derives a token-bucket answer from take.lua's t*den + c
// (allowed) or -(t*den + c) - 2 (denied), t shifted up by burst for a
// debit op (whose t may be down to -burst).
func bucketResult(op *limiter.Op, x int64) limiter.Result {
	allowed := x >= 0
	if !allowed {
		x = -x - 2
	}
	t, c := x/op.RateDen, x%op.RateDen
	if op.Debit {
		t -= op.Burst
	}
	return bucketAnswer(op, allowed, t, c)
}

// bucketAnswer is a token-bucket answer from t milli-tokens and carry c
// left after the op, for Memory and Redis alike.
func bucketAnswer(op *limiter.Op, allowed bool, t, c int64) limiter.Result {
	burst, num, den := op.Burst, op.RateNum, op.RateDen
	r := limiter.Result{Allowed: allowed, Remaining: max(t, 0)} // a debit's t may be below 0
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
	now := ops[0].Now
	w.Int(now)
	if now == 0 {
		now = guessClock() // the calendars' guess of Redis TIME
	}
	for i := range ops {
		op := &ops[i]
		w.Int(kind(op))
		w.Int(op.Limit)
		w.Int(op.Window)
		w.Int(scriptCost(op))
		w.Int(op.Burst)
		w.Int(op.RateNum)
		w.Int(op.RateDen)
		w.Int(int64(op.Veto) + jointFlag(ops, i))
		if op.Calendar != nil {
			p := periods(op.Calendar, now)
			for _, b := range p.b {
				w.String(b)
			}
		}
	}
}

// atomicArgCount is the number of arguments of an atomic.lua call of ops
// after digest or source.
func atomicArgCount(ops []limiter.Op) int {
	n := 3 + len(ops) + atomicArgs*len(ops) // numkeys, keys, tag, now, the ops
	for i := range ops {
		if ops[i].Calendar != nil {
			n += setStrings
		}
	}
	return n
}

// jointFlag is what atomic.lua adds to op i's veto: 4 for the first op of
// a joint (limiter.Op.Joined), 8 for the others, 0 for an op on its own.
func jointFlag(ops []limiter.Op, i int) int64 {
	switch {
	case ops[i].Joined:
		return 8
	case i+1 < len(ops) && ops[i+1].Joined:
		return 4
	}
	return 0
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
