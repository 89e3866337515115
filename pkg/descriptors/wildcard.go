package descriptors

import "strings"

// pattern is a compiled wildcard: '*' matches any run of characters.
type pattern struct {
	parts []string // the literal pieces between stars, len >= 2
}

func compilePattern(v string) pattern {
	return pattern{parts: strings.Split(v, "*")}
}

// match reports whether s matches the pattern. It does not allocate.
func (p pattern) match(s string) bool {
	first, last := p.parts[0], p.parts[len(p.parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, mid := range p.parts[1 : len(p.parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return true
}

// IsWildcard reports whether a configured value is a wildcard pattern.
func IsWildcard(v string) bool { return strings.IndexByte(v, '*') >= 0 }
