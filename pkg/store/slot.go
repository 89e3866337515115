package store

import (
	"slices"
	"strings"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the part between the first '{' and the next '}', when not
// empty) or of the whole key, modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[k]]
	}
	return int(crc) & 16383
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// slotCalls returns ops ordered by slot (ops of one slot, and so of one
// key, keep their order), perm with sorted[i] = ops[perm[i]], and the calls
// that carry them: one slot each, maxCallOps ops at most.
func slotCalls(ops []limiter.Op) (sorted []limiter.Op, perm []int, calls []takeChunk) {
	slots := make([]int, len(ops))
	perm = make([]int, len(ops))
	for i := range ops {
		slots[i] = Slot(ops[i].Key)
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(a, b int) int { return slots[a] - slots[b] })
	sorted = make([]limiter.Op, len(ops))
	for i, j := range perm {
		sorted[i] = ops[j]
	}
	for from := 0; from < len(sorted); {
		to := from + 1
		for to < len(sorted) && to-from < maxCallOps && slots[perm[to]] == slots[perm[from]] {
			to++
		}
		calls = append(calls, takeChunk{from: from, to: to})
		from = to
	}
	return sorted, perm, calls
}
