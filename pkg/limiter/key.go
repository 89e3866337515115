package limiter

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// MaxKeyLen is the longest key kept readable; a longer identifier is
// replaced by a digest.
const MaxKeyLen = 200

// readablePrefix is how much of a digested identifier stays readable.
const readablePrefix = 48

// DefaultTenant is the tenant of a request that carries no tenant entry.
const DefaultTenant = "default"

// windowSuffixRoom is reserved for the window start the store appends.
const windowSuffixRoom = 12

// AppendKey appends the base key for a matched limit to dst:
//
//	{prefix}:{<identifier>}:{tenant}:
//
// The identifier is the domain and the matched entries, key=value joined by
// '/', each part escaped so that ':', '{', '}', '*', '?', '[', ']', '/',
// '=', '%', spaces, control bytes and non-ASCII cannot collide or inject.
// Values of share_threshold levels are replaced by their wildcard pattern.
// The braces make the identifier a Redis Cluster hash tag, so the keys of
// one limit (both windows of a sliding window) share a slot. If the key
// would pass MaxKeyLen, the identifier is replaced by a readable prefix and
// the SHA-256 digest of the whole identifier.
func AppendKey[E descriptors.KV](dst []byte, prefix, domain string, l *descriptors.Limit, entries []E, tenant string) []byte {
	start := len(dst)
	dst = append(dst, prefix...)
	dst = append(dst, ':', '{')
	idStart := len(dst)
	dst = appendEscaped(dst, domain)
	for i, e := range entries {
		dst = append(dst, '/')
		dst = appendEscaped(dst, e.GetKey())
		dst = append(dst, '=')
		v := e.GetValue()
		if p, ok := l.SharedValue(i); ok {
			v = p
		}
		dst = appendEscaped(dst, v)
	}
	idEnd := len(dst)
	dst = append(dst, '}', ':')
	dst = appendEscaped(dst, tenant)
	dst = append(dst, ':')
	if len(dst)-start+windowSuffixRoom <= MaxKeyLen {
		return dst
	}
	sum := sha256.Sum256(dst[idStart:idEnd])
	tail := append([]byte(nil), dst[idEnd:]...)
	keep := min(readablePrefix, idEnd-idStart)
	dst = dst[:idStart+keep]
	dst = append(dst, '~')
	dst = hex.AppendEncode(dst, sum[:])
	return append(dst, tail...)
}

const hexDigits = "0123456789ABCDEF"

func appendEscaped(dst []byte, s string) []byte {
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

func safe(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '-' || c == '_' || c == '.' || c == '~' || c == '+' || c == '@' || c == ',' || c == ';' || c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')':
		return true
	}
	return false
}
