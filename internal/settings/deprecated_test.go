package settings

import (
	"flag"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
)

// parseSet parses as Parse does and returns the flag set too.
func parseSet(t *testing.T, args []string, env map[string]string) (*Settings, *flag.FlagSet) {
	t.Helper()
	s := &Settings{}
	fs := newFlagSet("test", s, io.Discard)
	getenv := func(k string) string { return env[k] }
	if err := s.parseFlags(fs, args, getenv); err != nil {
		t.Fatal(err)
	}
	if err := applyRefEnv(s, fs, getenv); err != nil {
		t.Fatal(err)
	}
	s.deprecated = deprecations(s.src)
	return s, fs
}

// valuesFor returns two values that flag name accepts, the first not its
// default, the second not the first.
func valuesFor(t *testing.T, name string) (string, string) {
	t.Helper()
	var vs []string
	for _, v := range []string{"true", "false", "7s", "8s", "7", "8", "0.7", "x:y", "z:w"} {
		f := newFlagSet("test", &Settings{}, io.Discard).Lookup(name)
		if f.Value.Set(v) == nil && f.Value.String() != f.DefValue && (len(vs) == 0 || f.Value.String() != vs[0]) {
			vs = append(vs, f.Value.String())
		}
	}
	if def := newFlagSet("test", &Settings{}, io.Discard).Lookup(name).DefValue; def != "" {
		vs = append(vs, def)
	}
	if len(vs) < 2 {
		t.Fatalf("--%s: no test values", name)
	}
	return vs[0], vs[1]
}

// TestFlagAliases: an old spelling sets its flag, names it in one
// warning, and its own env twin is the reference's variable read for
// that flag.
func TestFlagAliases(t *testing.T) {
	for _, a := range flagAliases {
		t.Run(a.old, func(t *testing.T) {
			if aliases[a.flag] != "" || refNames[a.flag] != EnvName(a.old) {
				t.Fatalf("--%s: alias of --%s, whose reference name is %q, want %s", a.old, a.flag, refNames[a.flag], EnvName(a.old))
			}
			v, _ := valuesFor(t, a.flag)
			s, fs := parseSet(t, []string{"--" + a.old + "=" + v}, nil)
			want := newFlagSet("test", &Settings{}, io.Discard).Lookup(a.flag)
			_ = want.Value.Set(v)
			if got := fs.Lookup(a.flag).Value.String(); got != want.Value.String() {
				t.Errorf("--%s=%s: --%s is %q, want %q", a.old, v, a.flag, got, want.Value.String())
			}
			if s.Name(a.flag) != "--"+a.old {
				t.Errorf("--%s named %q", a.flag, s.Name(a.flag))
			}
			if d := s.Deprecated(); len(d) != 1 || !strings.Contains(d[0], "use --"+a.flag) {
				t.Errorf("deprecations %q", d)
			}
		})
	}
}

// TestReferenceNames: the reference's variable for a flag FastLimit names
// otherwise sets it, after the flag's own twin and the command line.
func TestReferenceNames(t *testing.T) {
	for flagName, ref := range refNames {
		t.Run(ref, func(t *testing.T) {
			v, w := valuesFor(t, flagName)
			for _, tc := range []struct {
				args      []string
				env       map[string]string
				given, as string
			}{
				{nil, map[string]string{ref: v}, v, ref},
				{nil, map[string]string{ref: v, EnvName(flagName): w}, w, EnvName(flagName)},
				{[]string{"--" + flagName + "=" + w}, map[string]string{ref: v}, w, "--" + flagName},
			} {
				s, fs := parseSet(t, tc.args, tc.env)
				want := newFlagSet("test", &Settings{}, io.Discard).Lookup(flagName)
				_ = want.Value.Set(tc.given)
				if got := fs.Lookup(flagName).Value.String(); got != want.Value.String() || s.Name(flagName) != tc.as {
					t.Errorf("%v %v: --%s is %q from %s, want %q from %s", tc.args, tc.env, flagName, got, s.Name(flagName), want.Value.String(), tc.as)
				}
				if len(s.Deprecated()) != 0 {
					t.Errorf("%v %v: deprecations %q", tc.args, tc.env, s.Deprecated())
				}
			}
		})
	}
}

// TestDeprecatedFlags: a deprecated flag given warns, naming what to use;
// the reference's REDIS_AUTH does not.
func TestDeprecatedFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // a deprecation's prefix, "" for none
	}{
		{[]string{"--redis-auth", "pw"}, nil, "--redis-auth is deprecated: use --redis-password and --redis-username"},
		{nil, map[string]string{"REDIS_AUTH": "pw"}, ""},
		{[]string{"--redis-conns", "2"}, nil, "--redis-conns is deprecated and has no effect"},
		{nil, map[string]string{"REDIS_CONNS": "2"}, "REDIS_CONNS is deprecated and has no effect"},
		{nil, map[string]string{"USE_PROMETHEUS": "true"}, ""},
	} {
		s, _ := parseSet(t, tc.args, tc.env)
		d := s.Deprecated()
		if tc.want == "" && len(d) != 0 || tc.want != "" && (len(d) != 1 || !strings.HasPrefix(d[0], tc.want)) {
			t.Errorf("%v %v: deprecations %q, want %q", tc.args, tc.env, d, tc.want)
		}
	}
	fs := newFlagSet("test", &Settings{}, io.Discard)
	for name := range deprecatedUse {
		if f := fs.Lookup(name); f == nil || !strings.HasPrefix(f.Usage, "deprecated: ") {
			t.Errorf("--%s: not a deprecated flag", name)
		}
	}
	table := FlagsTable()
	deprecated := table[strings.Index(table, "### Deprecated flags"):]
	names := slices.Sorted(maps.Keys(deprecatedUse))
	for _, a := range flagAliases {
		names = append(names, a.old)
	}
	for _, name := range names {
		if !strings.Contains(deprecated, "| `--"+name+"` |") {
			t.Errorf("--%s is not in the docs' deprecated flags", name)
		}
	}
}
