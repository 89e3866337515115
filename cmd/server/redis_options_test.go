package main

import (
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/pkg/store"
)

func parseRedis(t *testing.T, args []string, env map[string]string) options {
	t.Helper()
	var o options
	fs := newFlagSet("test", &o, io.Discard)
	if err := parseOptions(fs, args, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestRedisEnvironment: envoyproxy/ratelimit's variables keep working.
func TestRedisEnvironment(t *testing.T) {
	o := parseRedis(t, nil, map[string]string{
		"REDIS_TYPE":                           "SENTINEL",
		"REDIS_URL":                            "mymaster,s1:26379,s2:26379",
		"REDIS_AUTH":                           "app:pw:with:colons",
		"REDIS_TLS":                            "true",
		"REDIS_TLS_CACERT":                     "/ca.pem",
		"REDIS_TLS_CLIENT_CERT":                "/cert.pem",
		"REDIS_TLS_CLIENT_KEY":                 "/key.pem",
		"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true",
		"REDIS_SENTINEL_PASSWORD":              "spw",
	})
	got := o.redis.clientOptions(o.redisURL, store.ConnOptions{PoolSize: 3})
	want := store.ClientOptions{Type: "SENTINEL", URL: "mymaster,s1:26379,s2:26379", Username: "app",
		Password: "pw:with:colons", SentinelPassword: "spw", Conn: store.ConnOptions{PoolSize: 3},
		TLS: store.TLSOptions{Enabled: true, CAFile: "/ca.pem", CertFile: "/cert.pem", KeyFile: "/key.pem",
			SkipHostnameVerification: true}}
	if got != want {
		t.Errorf("client options\n got %+v\nwant %+v", got, want)
	}
}

// TestRedisFlagsWin: our names win over the reference's, and a flag on the
// command line over any variable.
func TestRedisFlagsWin(t *testing.T) {
	o := parseRedis(t, []string{"--redis-tls-ca", "/flag-ca.pem", "--redis-password", "flagpw"}, map[string]string{
		"REDIS_URL":             "h:1",
		"REDIS_TLS_CA":          "/env-ca.pem",
		"REDIS_TLS_CACERT":      "/ref-ca.pem",
		"REDIS_TLS_CERT":        "/our-cert.pem",
		"REDIS_TLS_CLIENT_CERT": "/ref-cert.pem",
		"REDIS_AUTH":            "refpw",
		"REDIS_USERNAME":        "alice",
	})
	got := o.redis.clientOptions(o.redisURL, store.ConnOptions{})
	if got.TLS.CAFile != "/flag-ca.pem" || got.TLS.CertFile != "/our-cert.pem" || got.Password != "flagpw" ||
		got.Username != "alice" {
		t.Errorf("client options %+v", got)
	}
	// REDIS_AUTH without a colon is a password, and keeps the username.
	o = parseRedis(t, nil, map[string]string{"REDIS_URL": "h:1", "REDIS_AUTH": "refpw", "REDIS_USERNAME": "bob"})
	if got := o.redis.clientOptions(o.redisURL, store.ConnOptions{}); got.Password != "refpw" || got.Username != "bob" {
		t.Errorf("REDIS_AUTH=refpw: %+v", got)
	}
}

func TestRedisSettingsNeedURL(t *testing.T) {
	o := parseRedis(t, []string{"--redis-type", "cluster"}, nil)
	if _, err := newStore(o, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "--redis-url") {
		t.Errorf("--redis-type cluster without --redis-url: %v", err)
	}
	o = parseRedis(t, []string{"--redis-type", "Single"}, nil)
	if _, err := newStore(o, zap.NewNop()); err != nil {
		t.Errorf("--redis-type Single without a URL: %v", err)
	}
}

// TestStoreNameHidesPassword: the name logged for the store shows the
// deployment but no password.
func TestStoreNameHidesPassword(t *testing.T) {
	for _, args := range [][]string{
		{"--redis-url", "redis://app:hunter2@h:1/0"},
		{"--redis-type", "cluster", "--redis-url", "a:1,b:2", "--redis-password", "hunter2"},
		{"--redis-type", "sentinel", "--redis-url", "m,s:1", "--redis-auth", "u:hunter2"},
	} {
		o := parseRedis(t, args, nil)
		name := storeName(o)
		if strings.Contains(name, "hunter2") || !strings.HasPrefix(name, "redis ") {
			t.Errorf("storeName(%q) = %q", args, name)
		}
		if _, err := newStore(o, zap.NewNop()); err != nil {
			t.Errorf("newStore(%q) = %v", args, err)
		}
	}
}
