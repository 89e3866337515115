package limiter

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

const (
	// MaxKeyLen is the longest key kept readable; past it the identifier is digested.
	MaxKeyLen = 200
	// DefaultTenant is the tenant of a request without a tenant entry.
	DefaultTenant = "default"

	readablePrefix   = 48 // of a digested identifier
	windowSuffixRoom = 12 // for the window start the store appends
)

// AppendKey appends a matched limit's base key to dst,
// "{prefix}:{<domain>/<key>=<value>...}:{tenant}:", each part
// percent-escaped so that none can collide or inject, share_threshold
// values as their pattern, the braces a Redis Cluster hash tag, then
// "#<Index>:" for a limit of a Joint but its first, and an identifier
// that would pass MaxKeyLen digested (docs/rules.md, "Key scheme").
func AppendKey[E descriptors.KV](dst []byte, prefix, domain string, l *descriptors.Limit, entries []E, tenant string) []byte {
	return appendKey(dst, prefix, domain, l, entries, tenant, false)
}

// AppendAllOrNothingKey appends the base key of an all-or-nothing domain's limit:
// AppendKey's, with the hash tag around the domain alone,
// "{prefix}:{<domain>}/<entries>:{tenant}:", so that all keys of a request
// share a Cluster slot. It never equals a plain key ("}/" against "}:").
func AppendAllOrNothingKey[E descriptors.KV](dst []byte, prefix, domain string, l *descriptors.Limit, entries []E, tenant string) []byte {
	return appendKey(dst, prefix, domain, l, entries, tenant, true)
}

// maxDomainTag and maxTenant are the longest escaped all-or-nothing key's domain and
// tenant kept whole; longer ones keep readableTag bytes and a digest.
const (
	maxDomainTag = 64
	maxTenant    = 64
)

func appendKey[E descriptors.KV](dst []byte, prefix, domain string, l *descriptors.Limit, entries []E, tenant string, allOrNothing bool) []byte {
	start := len(dst)
	dst = append(dst, prefix...)
	dst = append(dst, ':', '{')
	idStart := len(dst)
	dst = appendEscaped(dst, domain)
	tagEnd := 0 // where an all-or-nothing key's entries start, after "}"
	if allOrNothing {
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
	if !allOrNothing {
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
	if l.Joint != nil && l.Index > 0 { // one of several limits: a key of its own
		dst = strconv.AppendInt(append(dst, '#'), int64(l.Index), 10)
		dst = append(dst, ':')
	}
	if len(dst)-start+windowSuffixRoom <= MaxKeyLen {
		return dst
	}
	// Digest the identifier (an all-or-nothing key keeps its tag whole).
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

// An over-long tag keeps readableTag escaped bytes and tagDigestBytes of SHA-256.
const (
	readableTag    = 16
	tagDigestBytes = 16
)

const hexDigits = "0123456789ABCDEF"

// appendEscaped appends s with every unsafe byte as %XX.
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

var safeBytes = func() (t [256]bool) {
	for c := range t {
		t[c] = safe(byte(c))
	}
	return t
}()

// safe reports whether c stands for itself in a key; '~' marks a digest.
func safe(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '-' || c == '_' || c == '.' || c == '+' || c == '@' || c == ',' || c == ';' || c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')':
		return true
	}
	return false
}
