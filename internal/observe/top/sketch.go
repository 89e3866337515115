package top

import (
	"math"
	"sync"
)

// idBytes bounds the identifier bytes a counter keeps; longer identifiers
// are kept as their first idBytes bytes, told apart by their hash.
const idBytes = 64

// maxShards is how many independently locked parts a summary has at
// most; each has at least minShardKeys counters (unless there are fewer).
const (
	maxShards    = 8
	minShardKeys = 16
)

// counter is one monitored identifier of a Space-Saving summary: count
// overestimates its decayed hits by at most err.
type counter struct {
	hash       uint64
	count, err float64
	id         [idBytes]byte // identifier(): the values, each length-prefixed
	idLen      uint8
	truncated  bool
}

// summary is a Space-Saving summary of one rule's identifiers, in shards
// by hash: each identifier lives in one shard, so shards never overlap.
type summary struct {
	shards []shard
	window float64 // the decay's time constant, s
}

// shard is a Space-Saving summary of the identifiers hashing to it: a
// min-heap of counters by count, and an open-addressing table from hash
// to counter. Every array is allocated up front; nothing grows.
type shard struct {
	mu       sync.Mutex
	epoch    int64 // the decay landmark counts are weighed to, Unix s
	n        int   // counters in use
	counters []counter
	heap     []int32 // counter indices, heap[0] the smallest count
	pos      []int32 // pos[c] is counter c's place in heap
	table    []int32 // counter index + 1 at a hash's slot; 0: empty
	_        [40]byte
}

// newSummary returns a summary of at most keys counters (at least one).
func newSummary(keys int, window float64) *summary {
	keys = max(keys, 1)
	n := max(min(keys/minShardKeys, maxShards), 1)
	per := (keys + n - 1) / n
	s := &summary{shards: make([]shard, n), window: window}
	slots := 1
	for slots < 2*per {
		slots <<= 1
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.counters = make([]counter, per)
		sh.heap = make([]int32, per)
		sh.pos = make([]int32, per)
		sh.table = make([]int32, slots)
	}
	return s
}

// add counts w for the identifier of hash h, weighed at epoch; id writes
// a new counter's identifier.
func (s *summary) add(h uint64, w float64, epoch int64, id ident) {
	sh := &s.shards[h%uint64(len(s.shards))]
	sh.mu.Lock()
	w = sh.reweigh(w, epoch, s.window)
	if c := sh.find(h); c >= 0 {
		sh.counters[c].count += w
		sh.down(int(sh.pos[c]))
		sh.mu.Unlock()
		return
	}
	var c int32
	if sh.n < len(sh.counters) {
		c = int32(sh.n)
		sh.heap[sh.n], sh.pos[c] = c, int32(sh.n)
		sh.n++
		sh.counters[c] = counter{hash: h, count: w}
		sh.up(sh.n - 1)
	} else {
		// Space-Saving: the smallest counter takes the newcomer, its
		// count the newcomer's error.
		c = sh.heap[0]
		old := &sh.counters[c]
		sh.remove(old.hash)
		*old = counter{hash: h, count: old.count + w, err: old.count}
		sh.down(0)
	}
	sh.insert(h, c)
	ct := &sh.counters[c]
	ct.idLen, ct.truncated = id.fill(ct.id[:])
	sh.mu.Unlock()
}

// reweigh takes the shard to epoch if it is older, and returns w weighed
// at the shard's epoch. sh.mu must be held.
func (sh *shard) reweigh(w float64, epoch int64, window float64) float64 {
	switch {
	case epoch > sh.epoch:
		if sh.epoch != 0 {
			f := math.Exp(-float64(epoch-sh.epoch) / window)
			for i := range sh.n {
				sh.counters[i].count *= f
				sh.counters[i].err *= f
			}
		}
		sh.epoch = epoch
	case epoch < sh.epoch: // a decision weighed before the shard moved on
		w *= math.Exp(-float64(sh.epoch-epoch) / window)
	}
	return w
}

// slot returns the table slot of hash h's probe start.
func (sh *shard) slot(h uint64) int { return int((h >> 32) & uint64(len(sh.table)-1)) }

// find returns the counter of hash h, or -1.
func (sh *shard) find(h uint64) int32 {
	mask := len(sh.table) - 1
	for i := sh.slot(h); ; i = (i + 1) & mask {
		c := sh.table[i] - 1
		if c < 0 {
			return -1
		}
		if sh.counters[c].hash == h {
			return c
		}
	}
}

func (sh *shard) insert(h uint64, c int32) {
	mask := len(sh.table) - 1
	i := sh.slot(h)
	for sh.table[i] != 0 {
		i = (i + 1) & mask
	}
	sh.table[i] = c + 1
}

// remove deletes hash h from the table, shifting back the entries after it
// (linear probing without tombstones).
func (sh *shard) remove(h uint64) {
	mask := len(sh.table) - 1
	i := sh.slot(h)
	for sh.counters[sh.table[i]-1].hash != h {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; sh.table[j] != 0; j = (j + 1) & mask {
		home := sh.slot(sh.counters[sh.table[j]-1].hash)
		// Move j's entry to the hole at i unless its home lies in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			sh.table[i] = sh.table[j]
			i = j
		}
	}
	sh.table[i] = 0
}

func (sh *shard) less(a, b int) bool {
	return sh.counters[sh.heap[a]].count < sh.counters[sh.heap[b]].count
}

func (sh *shard) swap(a, b int) {
	sh.heap[a], sh.heap[b] = sh.heap[b], sh.heap[a]
	sh.pos[sh.heap[a]], sh.pos[sh.heap[b]] = int32(a), int32(b)
}

func (sh *shard) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !sh.less(i, p) {
			return
		}
		sh.swap(i, p)
		i = p
	}
}

func (sh *shard) down(i int) {
	for {
		l := 2*i + 1
		if l >= sh.n {
			return
		}
		m := l
		if r := l + 1; r < sh.n && sh.less(r, l) {
			m = r
		}
		if !sh.less(m, i) {
			return
		}
		sh.swap(i, m)
		i = m
	}
}

// snapshot appends the summary's counters weighed at epoch (decayed to
// now by scale) to out, and returns it with the largest count an
// identifier it does not hold may have (0 while a shard has room).
func (s *summary) snapshot(out []counter, epoch int64, scale float64) ([]counter, float64) {
	unheld := 0.0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.reweigh(0, epoch, s.window)
		for j := range sh.n {
			c := sh.counters[j]
			c.count *= scale
			c.err *= scale
			out = append(out, c)
		}
		if sh.n == len(sh.counters) {
			unheld = max(unheld, sh.counters[sh.heap[0]].count*scale)
		}
		sh.mu.Unlock()
	}
	return out, unheld
}

// len returns the counters in use.
func (s *summary) len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += s.shards[i].n
		s.shards[i].mu.Unlock()
	}
	return n
}
