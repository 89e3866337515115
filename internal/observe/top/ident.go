package top

import "github.com/fastlimit/fastlimit/pkg/limiter"

// ident is a decided descriptor's identifier: the values of the entries
// its rule does not fix (key-only and wildcard levels), in order.
type ident struct {
	view limiter.View
	i    int    // the descriptor
	vars []bool // of its rule
}

// Multipliers of hashString (64-bit odd constants of splitmix64).
const (
	m1 = 0xbf58476d1ce4e5b9
	m2 = 0x94d049bb133111eb
)

// hash returns the identifier's 64-bit hash, the same in every process
// (replicas' answers merge by it), reading every byte of every value.
func (id ident) hash() uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	n := min(id.view.Entries(id.i), len(id.vars))
	for j := range n {
		if id.vars[j] {
			_, v := id.view.Entry(id.i, j)
			h = hashString(h^uint64(len(v))*m2, v)
		}
	}
	h ^= h >> 31
	h *= m2
	return h ^ h>>29
}

// hashString mixes s into h eight bytes at a time.
func hashString(h uint64, s string) uint64 {
	for len(s) >= 8 {
		w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		h = (h ^ w) * m1
		h ^= h >> 32
		s = s[8:]
	}
	var w uint64
	for i := range len(s) {
		w |= uint64(s[i]) << (8 * i)
	}
	h = (h ^ w ^ uint64(len(s))<<59) * m1
	return h ^ h>>29
}

// fill writes the identifier into dst, each value as a length byte and
// its bytes, as much as fits; it returns the bytes written and whether
// some were left out (a value of 255 bytes or more, or no room).
func (id ident) fill(dst []byte) (n uint8, truncated bool) {
	k := 0
	entries := min(id.view.Entries(id.i), len(id.vars))
	for j := range entries {
		if !id.vars[j] {
			continue
		}
		_, v := id.view.Entry(id.i, j)
		if k == len(dst) {
			return uint8(k), true
		}
		l := min(len(v), 255)
		dst[k] = byte(l)
		k++
		c := copy(dst[k:], v[:l])
		k += c
		if c < len(v) {
			return uint8(k), true
		}
	}
	return uint8(k), false
}

// values decodes what fill wrote.
func values(b []byte) []string {
	out := []string{}
	for len(b) > 0 {
		l := min(int(b[0]), len(b)-1)
		out = append(out, string(b[1:1+l]))
		b = b[1+l:]
	}
	return out
}
