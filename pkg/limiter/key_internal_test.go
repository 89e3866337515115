package limiter

import (
	"bytes"
	"testing"
)

// escapeByByte is appendEscaped as first written, one byte at a time: the
// reference the run-copying version must match.
func escapeByByte(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safe(c) {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}

func FuzzAppendEscaped(f *testing.F) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, s := range []string{"", "alice", "a:b", "%", "~x~", "10.0.0.1", "/path?q=1", "é", string(all)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		prefix := []byte("p:")
		got := appendEscaped(bytes.Clone(prefix), s)
		if want := escapeByByte(bytes.Clone(prefix), s); !bytes.Equal(got, want) {
			t.Fatalf("appendEscaped(%q) = %q, want %q", s, got, want)
		}
	})
}
