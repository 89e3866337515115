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
// '=', '%', '~', spaces, control bytes and non-ASCII cannot collide or
// inject.
// Values of share_threshold levels are replaced by their wildcard pattern.
// The braces make the identifier a Redis Cluster hash tag, so the keys of
// one limit (both windows of a sliding window) share a slot. If the key
// would pass MaxKeyLen, the identifier is replaced by a readable prefix and
// the SHA-256 digest of the whole identifier, after a '~' that no escaped
// part contains.
func AppendKey[E descriptors.KV](dst []byte, prefix, domain string, l *descriptors.Limit, entries []E, tenant string) []byte {
	return appendKey(dst, prefix, domain, l, entries, tenant, false)
}

// AppendAtomicKey appends the base key of a limit of an all-or-nothing
// domain to dst. It is AppendKey's key with the hash tag around the domain
// alone:
//
//	{prefix}:{<domain>}/<entries>:{tenant}:
//
// so that every key of one request (a request has one domain) hashes to
// the same Redis Cluster slot and one script can decide them together. The
// price is that all of a domain's counters live on one cluster shard. A
// domain whose escaped name passes maxDomainTag bytes is tagged by a
// readable prefix and a digest of its name instead. Atomic and plain keys
// never collide: a plain key's tag closes with "}:", an atomic one's with
// "}/".
func AppendAtomicKey[E descriptors.KV](dst []byte, prefix, domain string, l *descriptors.Limit, entries []E, tenant string) []byte {
	return appendKey(dst, prefix, domain, l, entries, tenant, true)
}

// maxDomainTag is the longest escaped domain kept whole in an atomic key's
// hash tag.
const maxDomainTag = 64

// maxTenant is the longest escaped tenant kept whole; a longer one keeps
// readableTag bytes and a digest, like an over-long domain tag.
const maxTenant = 64

func appendKey[E descriptors.KV](dst []byte, prefix, domain string, l *descriptors.Limit, entries []E, tenant string, atomic bool) []byte {
	start := len(dst)
	dst = append(dst, prefix...)
	dst = append(dst, ':', '{')
	idStart := len(dst)
	dst = appendEscaped(dst, domain)
	tagEnd := 0 // where an atomic key's entries start, after "}"
	if atomic {
		if len(dst)-idStart > maxDomainTag {
			sum := sha256.Sum256(dst[idStart:])
			dst = append(dst[:idStart+readableTag], '~')
			dst = hex.AppendEncode(dst, sum[:tagDigestBytes])
		}
		dst = append(dst, '}')
		tagEnd = len(dst)
	}
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
	if !atomic {
		dst = append(dst, '}')
	}
	dst = append(dst, ':')
	tenantStart := len(dst)
	dst = appendEscaped(dst, tenant)
	if len(dst)-tenantStart > maxTenant {
		sum := sha256.Sum256(dst[tenantStart:])
		dst = append(dst[:tenantStart+readableTag], '~')
		dst = hex.AppendEncode(dst, sum[:tagDigestBytes])
	}
	dst = append(dst, ':')
	if len(dst)-start+windowSuffixRoom <= MaxKeyLen {
		return dst
	}
	// Digest the identifier; an atomic key keeps its tag whole. The
	// readable part shrinks to leave room for a long tag or tenant.
	sum := sha256.Sum256(dst[idStart:idEnd])
	tail := append([]byte(nil), dst[idEnd:]...)
	keepFrom := max(idStart, tagEnd)
	room := MaxKeyLen - windowSuffixRoom - (keepFrom - start) - 1 - 2*sha256.Size - len(tail)
	keep := max(min(readablePrefix, idEnd-keepFrom, room), 0)
	dst = dst[:keepFrom+keep]
	dst = append(dst, '~')
	dst = hex.AppendEncode(dst, sum[:])
	return append(dst, tail...)
}

// An over-long domain's atomic hash tag keeps readableTag bytes of the
// escaped name and tagDigestBytes of its SHA-256.
const (
	readableTag    = 16
	tagDigestBytes = 16
)

const hexDigits = "0123456789ABCDEF"

// appendEscaped appends s with every byte that is not safe as %XX. Runs of
// safe bytes, all of s in the common case, are copied whole.
func appendEscaped(dst []byte, s string) []byte {
	for {
		i := 0
		for i < len(s) && safeBytes[s[i]] {
			i++
		}
		dst = append(dst, s[:i]...)
		if i == len(s) {
			return dst
		}
		c := s[i]
		dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
		s = s[i+1:]
	}
}

// safeBytes[c] is safe(c).
var safeBytes = func() (t [256]bool) {
	for c := range t {
		t[c] = safe(byte(c))
	}
	return t
}()

// safe reports whether c stands for itself in a key. '~' does not: it
// marks a digest, so that no raw value can spell out another identifier's
// digested form.
func safe(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '-' || c == '_' || c == '.' || c == '+' || c == '@' || c == ',' || c == ';' || c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')':
		return true
	}
	return false
}
