package settings

import (
	"slices"
	"strings"
	"testing"
)

// withSocket makes isSocket report the reference's default socket as
// present (or not) for one test.
func withSocket(t *testing.T, present bool) {
	t.Helper()
	old := isSocket
	isSocket = func(p string) bool { return present && p == RefDefaultRedisSocket }
	t.Cleanup(func() { isSocket = old })
}

func hasPrefix(list []string, prefix string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// TestRedisURLUnset: in the reference's environment, an unset REDIS_URL
// means its default socket when it exists; otherwise the embedded store,
// with a warning naming it and what it means for replicas. Outside that
// environment, or with a URL, nothing changes.
func TestRedisURLUnset(t *testing.T) {
	cases := []struct {
		name    string
		socket  bool
		args    []string
		env     map[string]string
		wantURL string
		warn    bool // the in-memory warning
	}{
		{"reference env, socket present", true, nil, map[string]string{"RUNTIME_ROOT": "/data"}, RefDefaultRedisSocket, false},
		{"reference env, unix socket type", true, nil, map[string]string{"REDIS_SOCKET_TYPE": "unix"}, RefDefaultRedisSocket, false},
		{"reference env, no socket", false, nil, map[string]string{"RUNTIME_ROOT": "/data", "USE_STATSD": "false"}, "", true},
		{"not the reference's env", true, nil, nil, "", false},
		{"REDIS_URL set", true, nil, map[string]string{"RUNTIME_ROOT": "/data", "REDIS_URL": "r:6379"}, "r:6379", false},
		{"--redis-url given", true, []string{"--redis-url", "redis://x:1"}, map[string]string{"RUNTIME_ROOT": "/data"}, "redis://x:1", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			withSocket(t, tc.socket)
			o, err := readRef(t, tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if o.RedisURL != tc.wantURL {
				t.Errorf("redis url %q, want %q", o.RedisURL, tc.wantURL)
			}
			warned := hasPrefix(o.Warnings(), "REDIS_URL: unset")
			if warned != tc.warn {
				t.Errorf("in-memory warning %v, want %v: %q", warned, tc.warn, o.Warnings())
			}
			if warned {
				w := strings.Join(o.Warnings(), "\n")
				for _, want := range []string{RefDefaultRedisSocket, "in-memory store", "each replica counts alone"} {
					if !strings.Contains(w, want) {
						t.Errorf("warning lacks %q: %s", want, w)
					}
				}
			}
			if noted := hasPrefix(o.Notes(), "REDIS_URL is unset"); noted != (tc.wantURL == RefDefaultRedisSocket) {
				t.Errorf("notes %q", o.Notes())
			}
		})
	}
}

// TestRedisURLUnsetTCP: a reference environment that asks for TCP with no
// REDIS_URL has no default to follow; the REDIS_* setting without a URL is
// the error it was.
func TestRedisURLUnsetTCP(t *testing.T) {
	withSocket(t, true)
	o, err := readRef(t, nil, map[string]string{"REDIS_SOCKET_TYPE": "tcp"})
	if err == nil {
		err = o.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "without --redis-url") {
		t.Errorf("err %v", err)
	}
}

// TestUseStatsdDefault: USE_STATSD unset follows the reference's default
// (true) once STATSD_HOST or STATSD_PORT says where statsd is, unless
// another output was chosen; a note says what was decided.
func TestUseStatsdDefault(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want bool
		note string // a prefix of the note, "" for none
	}{
		{"STATSD_HOST", map[string]string{"STATSD_HOST": "statsd", "REDIS_URL": "r:1"}, true, "USE_STATSD is unset and STATSD_HOST is set: sending"},
		{"STATSD_PORT", map[string]string{"STATSD_PORT": "9125", "REDIS_URL": "r:1"}, true, "USE_STATSD is unset and STATSD_PORT is set: sending"},
		{"USE_STATSD=false", map[string]string{"STATSD_HOST": "statsd", "USE_STATSD": "false", "REDIS_URL": "r:1"}, false, ""},
		{"USE_PROMETHEUS", map[string]string{"STATSD_HOST": "statsd", "USE_PROMETHEUS": "true", "REDIS_URL": "r:1"}, false, "USE_STATSD is unset: envoyproxy/ratelimit's stats go to USE_PROMETHEUS"},
		{"DISABLE_STATS", map[string]string{"STATSD_HOST": "statsd", "DISABLE_STATS": "true", "REDIS_URL": "r:1"}, false, "USE_STATSD is unset and DISABLE_STATS"},
		{"no statsd address", map[string]string{"RUNTIME_ROOT": "/d", "REDIS_URL": "r:1"}, false, ""},
		{"FastLimit's own variables", map[string]string{"LOG_LEVEL": "debug", "REDIS_URL": "r:1"}, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := readRef(t, nil, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if o.RefStats.UseStatsd != tc.want {
				t.Errorf("use statsd %v, want %v", o.RefStats.UseStatsd, tc.want)
			}
			if tc.note == "" {
				if hasPrefix(o.Notes(), "USE_STATSD") {
					t.Errorf("notes %q, want none about USE_STATSD", o.Notes())
				}
			} else if !hasPrefix(o.Notes(), tc.note) {
				t.Errorf("notes %q lack %q", o.Notes(), tc.note)
			}
		})
	}
	// Without a statsd address, in the reference's environment, a warning
	// says what is not sent and how to send it; FastLimit's own
	// variables, another output or USE_STATSD=false say nothing.
	const warn = "USE_STATSD: unset; the reference's default (true) sends its stats to statsd at localhost:8125, FastLimit sends none: " +
		"USE_STATSD=true sends them (STATSD_HOST and STATSD_PORT say where), USE_STATSD=false says none are wanted"
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"RUNTIME_ROOT": "/d", "REDIS_URL": "r:1"}, true},
		{map[string]string{"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "REDIS_URL": "r:1"}, true},
		{map[string]string{"LOG_LEVEL": "debug", "REDIS_URL": "r:1", "SHADOW_MODE": "true"}, false},
		{map[string]string{"RUNTIME_ROOT": "/d", "REDIS_URL": "r:1", "USE_STATSD": "false"}, false},
		{map[string]string{"RUNTIME_ROOT": "/d", "REDIS_URL": "r:1", "USE_PROMETHEUS": "true"}, false},
		{map[string]string{"RUNTIME_ROOT": "/d", "REDIS_URL": "r:1", "DISABLE_STATS": "true"}, false},
		{map[string]string{"RUNTIME_ROOT": "/d", "REDIS_URL": "r:1", "USE_STATSD": "true"}, false},
	} {
		o, err := readRef(t, nil, tc.env)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(o.Warnings(), warn); got != tc.want {
			t.Errorf("%v: warned %t, want %t; warnings %q", tc.env, got, tc.want, o.Warnings())
		}
	}
	o, err := readRef(t, nil, map[string]string{"STATSD_HOST": "statsd.monitoring", "STATSD_PORT": "9125", "REDIS_URL": "r:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !hasPrefix(o.Notes(), "USE_STATSD is unset and STATSD_HOST is set: sending envoyproxy/ratelimit's stats to statsd at statsd.monitoring:9125") {
		t.Errorf("notes %q", o.Notes())
	}
}
