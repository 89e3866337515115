package descriptors_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// FuzzMatch checks one level of matching against a plain reference: an
// exact value beats the first wildcard that matches (in file order), which
// beats the key-only rule.
func FuzzMatch(f *testing.F) {
	for _, s := range [][4]string{
		{"v*", "va*", "val", "vabc"},
		{"*.example.com", "*", "", ".example.com"},
		{"/api/*/users", "/api/*", "/api/x/users", "/api//users"},
		{"a*b*c", "*c", "abc", "acb"},
		{"ab*ab", "*", "", "ab"},
		{"**", "a**b", "a", ""},
		{"\xff*", "*\x00", "\xff", "\xff\x00"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, p1, p2, exact, value string) {
		p1, p2 = wildcard(p1), wildcard(p2)
		exact = strings.ReplaceAll(exact, "*", "")
		rules := ds{
			{Key: "k", Value: p1, Limit: lim()},
			{Key: "k", Value: p2, Limit: lim()},
			{Key: "k", Limit: lim()},
		}
		if exact != "" {
			rules = append(rules, descriptors.Descriptor{Key: "k", Value: exact, Limit: lim()})
		}
		s, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: rules}})
		if p1 == p2 {
			if !errors.Is(err, descriptors.ErrDuplicatePath) {
				t.Fatalf("duplicate wildcard %q: err = %v", p1, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		want := "d.k"
		switch {
		case exact != "" && value == exact:
			want = "d.k_" + exact
		case glob(p1, value):
			want = "d.k_" + p1
		case glob(p2, value):
			want = "d.k_" + p2
		}
		l := descriptors.Match(s.Domain("d"), e("k", value))
		if l == nil || l.Path != want {
			t.Fatalf("Match(%q) with %q, %q, %q = %v, want %s", value, p1, p2, exact, l, want)
		}
	})
}

// wildcard makes p a wildcard pattern.
func wildcard(p string) string {
	if strings.Contains(p, "*") {
		return p
	}
	return p + "*"
}

// glob reports whether s matches p, where '*' matches any bytes: a
// dynamic program over prefixes, independent of the package's matcher.
func glob(p, s string) bool {
	// m[j] reports whether the pattern so far matches s[:j].
	m := make([]bool, len(s)+1)
	m[0] = true
	for i := 0; i < len(p); i++ {
		next := make([]bool, len(s)+1)
		for j := 0; j <= len(s); j++ {
			if p[i] == '*' {
				next[j] = m[j] || j > 0 && next[j-1]
			} else {
				next[j] = j > 0 && m[j-1] && s[j-1] == p[i]
			}
		}
		m = next
	}
	return m[len(s)]
}
