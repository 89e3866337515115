package store_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

const secret = "Sup3r-s3cret-pw"

func TestNewClientTypes(t *testing.T) {
	for _, tc := range []struct {
		typ, url string
		check    func(t *testing.T, c redis.UniversalClient)
	}{
		{"", "127.0.0.1:6379", single(func(o *redis.Options) bool { return o.Addr == "127.0.0.1:6379" && o.TLSConfig == nil })},
		{"SINGLE", "redis://app:" + secret + "@cache:6380/2", single(func(o *redis.Options) bool {
			return o.Addr == "cache:6380" && o.DB == 2 && o.Username == "app" && o.Password == secret
		})},
		{"single", "rediss://cache:6380", single(func(o *redis.Options) bool {
			return o.TLSConfig != nil && o.TLSConfig.ServerName == "cache" && o.TLSConfig.MinVersion == 0x0303
		})},
		{"Cluster", " a:1, b:2 ,c:3", func(t *testing.T, c redis.UniversalClient) {
			cc, ok := c.(*redis.ClusterClient)
			if !ok {
				t.Fatalf("client %T, want *redis.ClusterClient", c)
			}
			o := cc.Options()
			if strings.Join(o.Addrs, ",") != "a:1,b:2,c:3" || o.MaxRetries != -1 || !o.ContextTimeoutEnabled ||
				o.PoolSize != 7 || o.DialTimeout != 3*time.Second {
				t.Errorf("options %+v", o)
			}
		}},
		{"SENTINEL", "mymaster,s1:26379,s2:26379", single(func(o *redis.Options) bool {
			return o.Addr == "FailoverClient" && o.MaxRetries == 0
		})},
	} {
		t.Run(tc.typ+" "+store.ClientOptions{Type: tc.typ, URL: tc.url}.String(), func(t *testing.T) {
			c, err := store.NewClient(store.ClientOptions{Type: tc.typ, URL: tc.url,
				Conn: store.ConnOptions{PoolSize: 7, DialTimeout: 3 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tc.check(t, c)
		})
	}
}

// single checks a *redis.Client's options, and that it never retries.
func single(ok func(*redis.Options) bool) func(t *testing.T, c redis.UniversalClient) {
	return func(t *testing.T, c redis.UniversalClient) {
		rc, isClient := c.(*redis.Client)
		if !isClient {
			t.Fatalf("client %T, want *redis.Client", c)
		}
		o := rc.Options()
		// go-redis stores a MaxRetries of -1 as 0.
		if !ok(o) || o.MaxRetries != 0 || !o.ContextTimeoutEnabled || o.PoolSize != 7 || o.DialTimeout != 3*time.Second {
			t.Errorf("options %+v", o)
		}
	}
}

// TestNewClientBoundedPool: MaxConns bounds the pool, pipelines included,
// and Name names the connections, on every deployment type.
func TestNewClientBoundedPool(t *testing.T) {
	conn := store.ConnOptions{PoolSize: 3, MaxConns: 3, Name: "fastlimit-rlqs"}
	for _, tc := range []struct{ typ, url string }{{"single", "h:1"}, {"cluster", "a:1,b:2"}, {"sentinel", "m,s1:26379"}} {
		c, err := store.NewClient(store.ClientOptions{Type: tc.typ, URL: tc.url, Conn: conn})
		if err != nil {
			t.Fatal(err)
		}
		var max, pipe int
		var name string
		switch c := c.(type) {
		case *redis.Client:
			o := c.Options()
			max, pipe, name = o.MaxActiveConns, o.PipelinePoolSize, o.ClientName
		case *redis.ClusterClient:
			o := c.Options()
			max, pipe, name = o.MaxActiveConns, o.PipelinePoolSize, o.ClientName
		}
		_ = c.Close()
		if max != 3 || pipe != -1 || name != "fastlimit-rlqs" {
			t.Errorf("%s: MaxActiveConns %d, PipelinePoolSize %d, ClientName %q", tc.typ, max, pipe, name)
		}
	}
}

func TestNewClientOverridesURLCredentials(t *testing.T) {
	c, err := store.NewClient(store.ClientOptions{URL: "redis://old:pw@h:1", Username: "app", Password: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if o := c.(*redis.Client).Options(); o.Username != "app" || o.Password != secret {
		t.Errorf("credentials %q %q, want the options'", o.Username, o.Password)
	}
}

func TestNewClientErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	files.Write(t, notPEM, "not a certificate")
	for _, tc := range []struct {
		name string
		o    store.ClientOptions
		want string
	}{
		{"bad type", store.ClientOptions{Type: "ring", URL: "h:1"}, "want single, cluster or sentinel"},
		{"empty URL", store.ClientOptions{}, "empty"},
		{"single bad address", store.ClientOptions{URL: "app:" + secret + "@h"}, "want host:port"},
		{"single bad scheme", store.ClientOptions{URL: "http://app:" + secret + "@h:1"}, "scheme"},
		{"cluster URL", store.ClientOptions{Type: "cluster", URL: "redis://app:" + secret + "@h:1"}, "want host:port"},
		{"cluster no port", store.ClientOptions{Type: "cluster", URL: "a:1,b"}, "want host:port"},
		{"cluster bad port", store.ClientOptions{Type: "cluster", URL: "a:99999"}, "bad port"},
		{"cluster empty", store.ClientOptions{Type: "cluster", URL: " , "}, "no cluster seed"},
		{"sentinel no master", store.ClientOptions{Type: "sentinel", URL: "s1:26379,s2:26379"}, "MASTER_NAME"},
		{"sentinel no sentinels", store.ClientOptions{Type: "sentinel", URL: "mymaster"}, "no sentinel"},
		{"TLS settings, TLS off", store.ClientOptions{URL: "h:1", TLS: store.TLSOptions{CA: notPEM}}, "TLS is off"},
		{"CA not PEM", store.ClientOptions{URL: "h:1", TLS: store.TLSOptions{Enabled: true, CA: notPEM}}, "no PEM"},
		{"CA missing", store.ClientOptions{Type: "cluster", URL: "h:1", TLS: store.TLSOptions{Enabled: true, CA: dir + "/none"}}, "no such file"},
		{"cert without key", store.ClientOptions{URL: "rediss://h:1", TLS: store.TLSOptions{Cert: notPEM}}, "both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Password = secret
			c, err := store.NewClient(tc.o)
			if err == nil {
				c.Close()
				t.Fatalf("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

func TestClientOptionsString(t *testing.T) {
	for o, want := range map[store.ClientOptions]string{
		{URL: "redis://app:" + secret + "@h:1/0"}:            "single redis://app:xxxxx@h:1/0",
		{Type: "CLUSTER", URL: "a:1,b:2"}:                    "cluster a:1,b:2",
		{Type: "sentinel", URL: "m,s:1", Password: secret}:   "sentinel m,s:1",
		{URL: "rediss://:" + secret + "@h:1", Username: "x"}: "single rediss://:xxxxx@h:1",
	} {
		if got := o.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

// TestClientACL: a user and password reach the server; a wrong password
// fails without showing itself.
func TestClientACL(t *testing.T) {
	addr := redistest.StartServer(t, "--user", "alice", "on", ">"+secret, "~*", "+@all").Addr
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		o  store.ClientOptions
		ok bool
	}{
		{store.ClientOptions{URL: addr, Username: "alice", Password: secret}, true},
		{store.ClientOptions{URL: "redis://alice:" + secret + "@" + addr}, true},
		{store.ClientOptions{URL: addr, Username: "alice", Password: secret + "x"}, false},
	} {
		c, err := store.NewClient(tc.o)
		if err != nil {
			t.Fatal(err)
		}
		who, err := c.Do(ctx, "ACL", "WHOAMI").Text()
		c.Close()
		switch {
		case tc.ok && (err != nil || who != "alice"):
			t.Errorf("%s: ACL WHOAMI = %q, %v; want alice", tc.o, who, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: wrong password accepted", tc.o)
		case err != nil && strings.Contains(err.Error(), secret):
			t.Errorf("error shows the password: %v", err)
		}
		// The store authenticates with the same settings.
		err = newKind(t, "go-redis", tc.o).Open(ctx)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: store Open = %v", tc.o, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: store: wrong password accepted", tc.o)
		case err != nil && strings.Contains(err.Error(), secret):
			t.Errorf("store error shows the password: %v", err)
		}
	}
}

// newKind returns a Redis store of the kind named ("go-redis": Redis over
// NewClient), closed when t ends.
func newKind(t *testing.T, kind string, o store.ClientOptions) redisStore {
	t.Helper()
	if kind != "go-redis" {
		t.Fatalf("unknown store kind %q", kind)
	}
	return clientStore(t, o)
}

// clientStore returns a Redis store over a client that store.NewClient
// made for o, closed when t ends.
func clientStore(t testing.TB, o store.ClientOptions) *store.Redis {
	t.Helper()
	c, err := store.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	r := store.NewRedis(c, zaptest.NewLogger(t), store.RedisOptions{CloseClient: true})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// TestClientTLS runs against redis-server's TLS port with a CA made here,
// requiring client certificates.
func TestClientTLS(t *testing.T) {
	f := certtest.NewFiles(t)
	tlsPort := loopback.Port(t)
	redistest.StartServer(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", f.ServerCert,
		"--tls-key-file", f.ServerKey, "--tls-ca-cert-file", f.CAFile, "--tls-auth-clients", "yes")
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mutual := store.TLSOptions{Enabled: true, CA: f.CAFile, Cert: f.ClientCert, Key: f.ClientKey}
	with := func(change func(*store.TLSOptions)) store.TLSOptions {
		o := mutual
		change(&o)
		return o
	}
	for _, tc := range []struct {
		name string
		url  string
		tls  store.TLSOptions
		ok   bool
	}{
		{"mutual", tlsAddr, mutual, true},
		{"rediss URL", "rediss://" + tlsAddr, with(func(o *store.TLSOptions) { o.Enabled = false }), true},
		{"localhost", "localhost:" + strconv.Itoa(tlsPort), mutual, true},
		{"no client certificate", tlsAddr, with(func(o *store.TLSOptions) { o.Cert, o.Key = "", "" }), false},
		{"system roots", tlsAddr, with(func(o *store.TLSOptions) { o.CA = "" }), false},
		{"skip verify", tlsAddr, with(func(o *store.TLSOptions) { o.CA, o.SkipVerify = "", true }), true},
		{"wrong name", tlsAddr, with(func(o *store.TLSOptions) { o.ServerName = "cache.example" }), false},
		{"wrong name, hostname not verified", tlsAddr, with(func(o *store.TLSOptions) {
			o.ServerName, o.SkipHostnameVerification = "cache.example", true
		}), true},
		{"hostname not verified, system roots", tlsAddr, with(func(o *store.TLSOptions) {
			o.CA, o.SkipHostnameVerification = "", true
		}), false},
		{"plaintext", tlsAddr, store.TLSOptions{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kind := range []string{"go-redis"} {
				r := newKind(t, kind, store.ClientOptions{URL: tc.url, TLS: tc.tls,
					Conn: store.ConnOptions{DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second}})
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				err := r.Open(cctx)
				if tc.ok != (err == nil) {
					t.Fatalf("%s: Open = %v, want success %v", kind, err, tc.ok)
				}
				if !tc.ok {
					continue
				}
				op := limiter.Op{Key: "tls:{" + tc.name + "}:", Algorithm: descriptors.FixedWindow, Limit: 5000,
					Window: 60_000, Cost: 1000, Now: farBase}
				res := make([]limiter.Result, 1)
				if err := r.Take(cctx, []limiter.Op{op}, res); err != nil || !res[0].Allowed {
					t.Errorf("%s: Take over TLS = %+v, %v", kind, res[0], err)
				}
			}
		})
	}
}

// TestURLOptions: the URL's timeouts and db are honoured (flags win), and
// max_retries is refused: a retried script call could count twice.
func TestURLOptions(t *testing.T) {
	for _, tc := range []struct {
		url      string
		conn     store.ConnOptions
		dial     time.Duration
		read     time.Duration
		db       int
		errMatch string
	}{
		{url: "redis://127.0.0.1:6379", dial: time.Second},
		{url: "redis://127.0.0.1:6379/2?dial_timeout=150ms&read_timeout=2s", dial: 150 * time.Millisecond, read: 2 * time.Second, db: 2},
		{url: "redis://127.0.0.1:6379?dial_timeout=150ms&read_timeout=2s", conn: store.ConnOptions{DialTimeout: 40 * time.Millisecond},
			dial: 40 * time.Millisecond, read: 2 * time.Second},
		{url: "redis://127.0.0.1:6379?max_retries=3", errMatch: "max_retries=3"},
		{url: "redis://127.0.0.1:6379?bogus=1", errMatch: "bogus"},
	} {
		c, err := store.NewClient(store.ClientOptions{URL: tc.url, Conn: tc.conn})
		if tc.errMatch != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errMatch) {
				t.Errorf("%s: error %v, want one naming %q", tc.url, err, tc.errMatch)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		o := c.(*redis.Client).Options()
		if o.DialTimeout != tc.dial || (tc.read != 0 && o.ReadTimeout != tc.read) || o.DB != tc.db {
			t.Errorf("%s: dial %v read %v db %d; want %v %v %d", tc.url, o.DialTimeout, o.ReadTimeout, o.DB,
				tc.dial, tc.read, tc.db)
		}
		_ = c.Close()
	}
}

// TestClientUnixSocket reaches a single server on its unix socket, with
// envoyproxy/ratelimit's REDIS_SOCKET_TYPE=unix and a path, a unix:// URL,
// or a path alone, through both clients.
func TestClientUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	redistest.StartServer(t, "--unixsocket", sock, "--unixsocketperm", "700")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct{ socketType, url string }{
		{"unix", sock},
		{"UNIX", "unix://" + sock + "?db=3"},
		{"", sock},
	} {
		for _, kind := range []string{"go-redis"} {
			r := newKind(t, kind, store.ClientOptions{SocketType: tc.socketType, URL: tc.url,
				Conn: store.ConnOptions{DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second}})
			if err := r.Open(ctx); err != nil {
				t.Fatalf("%s %s %s: Open = %v", kind, tc.socketType, tc.url, err)
			}
			op := limiter.Op{Key: "unix:{" + kind + tc.socketType + tc.url + "}:", Algorithm: descriptors.FixedWindow, Limit: 1000,
				Window: 60_000, Cost: 1000, Now: farBase}
			res := make([]limiter.Result, 1)
			for i, want := range []bool{true, false} {
				if err := r.Take(ctx, []limiter.Op{op}, res); err != nil || res[0].Allowed != want {
					t.Errorf("%s %s: take %d = %+v, %v; want allowed %v", kind, tc.url, i, res[0], err, want)
				}
			}
		}
	}
	c, err := store.NewClient(store.ClientOptions{SocketType: "unix", URL: "unix://" + sock + "?db=3"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if o := c.(*redis.Client).Options(); o.Network != "unix" || o.Addr != sock || o.DB != 3 {
		t.Errorf("options: network %q addr %q db %d", o.Network, o.Addr, o.DB)
	}

	for _, tc := range []struct {
		o    store.ClientOptions
		want string
	}{
		{store.ClientOptions{SocketType: "tcp", URL: sock}, "is a socket path"},
		{store.ClientOptions{SocketType: "unix", URL: "redis://h:1"}, "no socket path"},
		{store.ClientOptions{SocketType: "udp", URL: "h:1"}, "want tcp or unix"},
		{store.ClientOptions{SocketType: "unix", URL: sock, TLS: store.TLSOptions{Enabled: true}}, "unix socket"},
	} {
		if _, err := store.NewClient(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to mention %q", tc.o, err, tc.want)
		}
	}
}
