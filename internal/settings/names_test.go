package settings

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode"
)

// TestFieldsNamedAfterFlags: every flag sets a field of Settings (or of a
// package's Options that Settings holds), named after the flag: the
// field's name is the flag's last words (--redis-pool-size: PoolSize or
// RedisPoolSize), or Enabled in a struct so named (--tracing:
// Tracing.Enabled; --redis-tls: TLS.Enabled). Deprecated spellings, which set another
// flag's field, and --redis-conns, which sets none, are left out.
func TestFieldsNamedAfterFlags(t *testing.T) {
	s := &Settings{}
	fs := newFlagSet("test", s, io.Discard)
	fields := map[uintptr][]string{} // a field's address -> its path
	fieldPaths(reflect.ValueOf(s).Elem(), nil, fields)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		if aliases[f.Name] != "" || f.Name == "redis-conns" {
			return
		}
		path, ok := fields[valueAddr(f.Value)]
		if !ok {
			t.Errorf("--%s sets no field of Settings", f.Name)
			return
		}
		n++
		if !namedAfter(f.Name, path) {
			t.Errorf("--%s sets %s: name the field after the flag", f.Name, strings.Join(path, "."))
		}
	})
	if n < 100 {
		t.Fatalf("%d flags checked: the test lost them", n)
	}
}

// TestNamedAfter holds the rule of TestFieldsNamedAfterFlags.
func TestNamedAfter(t *testing.T) {
	for _, tc := range []struct {
		flag string
		path string
		want bool
	}{
		{"redis-pool-size", "Redis.PoolSize", true},
		{"redis-pool-size", "RedisPoolSize", true},
		{"redis-tls-ca", "Redis.TLSCA", true},
		{"tracing", "Tracing.Enabled", true},
		{"dogstatsd", "RefStats.DogStatsd", true},
		{"redis-pool-size", "Redis.Size", true},
		{"redis-pool-size", "Redis.OlSize", false}, // not whole words
		{"stats-off", "RefStats.DisableStats", false},
		{"response-headers", "Headers.Mode", false},
		{"redis-tls", "TLS.Enabled", true},
		{"grpc-tls", "Client.Enabled", false},
		{"redis-batches", "Redis.InFlight", false},
	} {
		if got := namedAfter(tc.flag, strings.Split(tc.path, ".")); got != tc.want {
			t.Errorf("namedAfter(%s, %s) = %v, want %v", tc.flag, tc.path, got, tc.want)
		}
	}
}

// namedAfter reports whether the field at path is named after flag.
func namedAfter(flag string, path []string) bool {
	words := strings.Split(flag, "-")
	name := letters(path[len(path)-1])
	for k := range words {
		if strings.Join(words[k:], "") == name {
			return true
		}
	}
	return path[len(path)-1] == "Enabled" && len(path) > 1 && namedAfter(flag, path[:len(path)-1])
}

// letters is s in lower case, without what is not a letter or a digit.
func letters(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return unicode.ToLower(r)
		}
		return -1
	}, s)
}

// fieldPaths records the address and path of every field of v, at any
// depth.
func fieldPaths(v reflect.Value, path []string, out map[uintptr][]string) {
	for i := range v.NumField() {
		f := v.Field(i)
		p := append(append([]string{}, path...), v.Type().Field(i).Name)
		out[f.UnsafeAddr()] = p
		if f.Kind() == reflect.Struct {
			fieldPaths(f, p, out)
		}
	}
}

// valueAddr is the address of the variable a flag sets: the standard
// flag values are pointers to it, checked holds one.
func valueAddr(v flag.Value) uintptr {
	if c, ok := v.(checked); ok {
		return reflect.ValueOf(c.p).Pointer()
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer {
		return rv.Pointer()
	}
	return 0
}
