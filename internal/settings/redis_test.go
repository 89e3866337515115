package settings

import (
	"io"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/store"
)

func parseRedis(t *testing.T, args []string, env map[string]string) *Settings {
	t.Helper()
	o, err := Parse("test", args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
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
	o.Redis.Client.Conn.PoolSize = 3
	got := o.Redis.ClientOptions()
	want := store.ClientOptions{Type: "SENTINEL", URL: "mymaster,s1:26379,s2:26379", Username: "app",
		Password: "pw:with:colons", SentinelPassword: "spw", Conn: store.ConnOptions{PoolSize: 3},
		TLS: store.TLSOptions{Enabled: true, CA: "/ca.pem", Cert: "/cert.pem", Key: "/key.pem",
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
	got := o.Redis.ClientOptions()
	if got.TLS.CA != "/flag-ca.pem" || got.TLS.Cert != "/our-cert.pem" || got.Password != "flagpw" ||
		got.Username != "alice" {
		t.Errorf("client options %+v", got)
	}
	// REDIS_AUTH without a colon is a password, and keeps the username.
	o = parseRedis(t, nil, map[string]string{"REDIS_URL": "h:1", "REDIS_AUTH": "refpw", "REDIS_USERNAME": "bob"})
	if got := o.Redis.ClientOptions(); got.Password != "refpw" || got.Username != "bob" {
		t.Errorf("REDIS_AUTH=refpw: %+v", got)
	}
}

func TestRedisSettingsNeedURL(t *testing.T) {
	o := parseRedis(t, []string{"--redis-type", "cluster"}, nil)
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--redis-url") {
		t.Errorf("--redis-type cluster without --redis-url: %v", err)
	}
	o = parseRedis(t, []string{"--redis-type", "Single"}, nil)
	if err := o.Validate(); err != nil {
		t.Errorf("--redis-type Single without a URL: %v", err)
	}
}
