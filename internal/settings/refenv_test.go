package settings

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/rls"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// referenceVars are the variables of envoyproxy/ratelimit's
// src/settings/settings.go (the version FastLimit targets), in its order.
var referenceVars = strings.Fields(`
HOST PORT DEBUG_HOST DEBUG_PORT GRPC_UDS GRPC_HOST
GRPC_PORT GRPC_MAX_CONNECTION_AGE GRPC_MAX_CONNECTION_AGE_GRACE GRPC_SERVER_USE_TLS GRPC_SERVER_TLS_CERT GRPC_SERVER_TLS_KEY
GRPC_CLIENT_TLS_CACERT GRPC_CLIENT_TLS_SAN LOG_LEVEL LOG_FORMAT CONFIG_TYPE FORCE_START_WITHOUT_INITIAL_CONFIG
CONFIG_GRPC_XDS_NODE_ID CONFIG_GRPC_XDS_NODE_METADATA CONFIG_GRPC_XDS_SERVER_URL CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS CONFIG_GRPC_XDS_SERVER_USE_TLS
CONFIG_GRPC_XDS_CLIENT_TLS_CERT CONFIG_GRPC_XDS_CLIENT_TLS_KEY CONFIG_GRPC_XDS_SERVER_TLS_CACERT CONFIG_GRPC_XDS_SERVER_TLS_SAN XDS_CLIENT_BACKOFF_INITIAL_INTERVAL XDS_CLIENT_BACKOFF_MAX_INTERVAL
XDS_CLIENT_BACKOFF_RANDOM_FACTOR XDS_CLIENT_BACKOFF_JITTER XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES USE_DOG_STATSD USE_DOG_STATSD_MOGRIFIERS USE_STATSD
STATSD_HOST STATSD_PORT EXTRA_TAGS STATS_FLUSH_INTERVAL DISABLE_STATS USE_PROMETHEUS
PROMETHEUS_ADDR PROMETHEUS_PATH PROMETHEUS_MAPPER_YAML RUNTIME_ROOT RUNTIME_SUBDIRECTORY RUNTIME_APPDIRECTORY
RUNTIME_IGNOREDOTFILES RUNTIME_WATCH_ROOT EXPIRATION_JITTER_MAX_SECONDS LOCAL_CACHE_SIZE_IN_BYTES NEAR_LIMIT_RATIO CACHE_KEY_PREFIX
BACKEND_TYPE STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT LIMIT_RESPONSE_HEADERS_ENABLED LIMIT_LIMIT_HEADER LIMIT_REMAINING_HEADER LIMIT_RESET_HEADER
HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED REDIS_SOCKET_TYPE REDIS_TYPE REDIS_URL REDIS_POOL_SIZE REDIS_AUTH
REDIS_TLS REDIS_TLS_CLIENT_CERT REDIS_TLS_CLIENT_KEY REDIS_TLS_CACERT REDIS_TLS_SKIP_HOSTNAME_VERIFICATION REDIS_PIPELINE_WINDOW
REDIS_PIPELINE_LIMIT REDIS_PERSECOND REDIS_PERSECOND_SOCKET_TYPE REDIS_PERSECOND_TYPE REDIS_PERSECOND_URL REDIS_PERSECOND_POOL_SIZE
REDIS_PERSECOND_AUTH REDIS_PERSECOND_TLS REDIS_SENTINEL_AUTH REDIS_PERSECOND_SENTINEL_AUTH REDIS_PERSECOND_PIPELINE_WINDOW REDIS_PERSECOND_PIPELINE_LIMIT
REDIS_HEALTH_CHECK_ACTIVE_CONNECTION REDIS_TIMEOUT REDIS_PERSECOND_TIMEOUT REDIS_POOL_ON_EMPTY_BEHAVIOR REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR MEMCACHE_HOST_PORT
MEMCACHE_MAX_IDLE_CONNS MEMCACHE_SRV MEMCACHE_SRV_REFRESH MEMCACHE_TLS MEMCACHE_TLS_CLIENT_CERT MEMCACHE_TLS_CLIENT_KEY
MEMCACHE_TLS_CACERT MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION SHADOW_MODE QUOTA_MODE RESPONSE_DYNAMIC_METADATA MERGE_DOMAIN_CONFIG
TRACING_ENABLED TRACING_SERVICE_NAME TRACING_SERVICE_NAMESPACE TRACING_SERVICE_INSTANCE_ID TRACING_EXPORTER_PROTOCOL TRACING_SAMPLING_RATE
`)

// TestRefVarsCoverReference: every variable the reference reads is in
// the table, once.
func TestRefVarsCoverReference(t *testing.T) {
	if len(referenceVars) != 108 {
		t.Fatalf("the embedded list has %d variables, want the reference's 108", len(referenceVars))
	}
	seen := map[string]int{}
	for _, v := range refVars {
		seen[v.name]++
		if seen[v.name] > 1 {
			t.Errorf("%s is in the table twice", v.name)
		}
	}
	for _, name := range referenceVars {
		if seen[name] == 0 {
			t.Errorf("%s, read by the reference, is not in refVars", name)
		}
	}
}

// TestRefVarsConsistent checks each status against the flags registered:
// a twin is a flag's env twin or, where FastLimit names the flag
// otherwise, nobody's twin, a mapped variable has its mapping, and a
// variable only warned about or refused is nobody's twin (when a flag of
// that name is added, the table must say the variable is honoured).
// Deprecated aliases have no twins: their names are the reference's.
func TestRefVarsConsistent(t *testing.T) {
	fs := newFlagSet("test", &Settings{}, io.Discard)
	twins := map[string]string{} // env twin -> flag
	fs.VisitAll(func(f *flag.Flag) {
		if aliases[f.Name] == "" {
			twins[EnvName(f.Name)] = f.Name
		}
	})
	mapped := map[string]refMapping{}
	for _, mp := range refMappings {
		for _, v := range mp.vars {
			if _, dup := mapped[v]; dup {
				t.Errorf("%s is read by two mappings", v)
			}
			mapped[v] = mp
		}
		for _, f := range mp.flags {
			if fs.Lookup(f) == nil {
				t.Errorf("a mapping of %v sets --%s, which is not a flag", mp.vars, f)
			}
		}
	}
	byName := map[string]refVar{}
	for _, v := range refVars {
		byName[v.name] = v
		switch v.how {
		case refTwin:
			if fs.Lookup(v.flag) == nil || aliases[v.flag] != "" {
				t.Errorf("%s: twin of --%s, which is not a flag", v.name, v.flag)
			} else if EnvName(v.flag) == v.name && twins[v.name] != v.flag {
				t.Errorf("%s: twin of --%s, but that flag's twin is %s", v.name, v.flag, EnvName(v.flag))
			} else if f, ok := twins[v.name]; ok && f != v.flag {
				t.Errorf("%s: the reference's name for --%s, but the env twin of --%s", v.name, v.flag, f)
			} else if EnvName(v.flag) != v.name && refNames[v.flag] != v.name {
				t.Errorf("%s: the reference's name for --%s, but refNames has %q", v.name, v.flag, refNames[v.flag])
			}
		case refMapped:
			mp, ok := mapped[v.name]
			if !ok || !slices.Contains(mp.flags, v.flag) {
				t.Errorf("%s: mapped onto --%s, but no mapping reads it for that flag", v.name, v.flag)
			}
			if f, ok := twins[v.name]; ok {
				t.Errorf("%s: mapped, but it is the twin of --%s", v.name, f)
			}
		case refWarned, refRefused:
			if f, ok := twins[v.name]; ok {
				t.Errorf("%s: warned or refused, but it is the env twin of --%s: honour it (refTwin)", v.name, f)
			}
			if v.note == "" || v.flag != "" {
				t.Errorf("%s: warned or refused needs a note and no flag", v.name)
			}
		}
	}
	for v := range mapped {
		if byName[v].how != refMapped {
			t.Errorf("%s is read by a mapping but not marked mapped", v)
		}
	}
	for twin, f := range twins {
		if v, ok := byName[twin]; ok && v.how != refTwin {
			t.Errorf("--%s's twin %s is a reference variable, marked %d, not as its twin", f, twin, v.how)
		}
	}
}

// readRef reads settings as the server does, from args and env.
func readRef(t *testing.T, args []string, env map[string]string) (*Settings, error) {
	t.Helper()
	return Parse("test", args, func(k string) string { return env[k] }, io.Discard)
}

// TestRefEnvMapping maps the reference's variables onto the options, with
// its defaults where a variable of a pair is missing.
func TestRefEnvMapping(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, o *Settings)
	}{
		{"nothing set: FastLimit's defaults", nil, func(t *testing.T, o *Settings) {
			want := Settings{HTTPAddr: ":8080", GRPCAddr: ":8081", Config: "config", KeyPrefix: "ratelimit"}
			if o.HTTPAddr != want.HTTPAddr || o.GRPCAddr != want.GRPCAddr || o.Config != want.Config ||
				o.KeyPrefix != want.KeyPrefix || o.Admin.Addr != "127.0.0.1:6070" || o.Rules().Load.Tree {
				t.Errorf("options %+v", o)
			}
		}},
		{"ports", map[string]string{"PORT": "9080", "GRPC_PORT": "9081", "DEBUG_PORT": "9070"}, func(t *testing.T, o *Settings) {
			if o.HTTPAddr != ":9080" || o.GRPCAddr != ":9081" || o.Admin.Addr != "127.0.0.1:9070" {
				t.Errorf("addresses %q %q %q", o.HTTPAddr, o.GRPCAddr, o.Admin.Addr)
			}
			if o.Name("http-addr") != "PORT" || o.Name("admin-addr") != "DEBUG_PORT" {
				t.Errorf("sources %v", o.src)
			}
		}},
		{"hosts", map[string]string{"HOST": "127.0.0.2", "GRPC_HOST": "::1", "DEBUG_HOST": "0.0.0.0"}, func(t *testing.T, o *Settings) {
			if o.HTTPAddr != "127.0.0.2:8080" || o.GRPCAddr != "[::1]:8081" || o.Admin.Addr != "0.0.0.0:6070" {
				t.Errorf("addresses %q %q %q", o.HTTPAddr, o.GRPCAddr, o.Admin.Addr)
			}
		}},
		{"gRPC on a unix socket", map[string]string{"GRPC_UDS": "/run/rl.sock", "GRPC_PORT": "1"}, func(t *testing.T, o *Settings) {
			if o.GRPCAddr != "unix:/run/rl.sock" {
				t.Errorf("grpc address %q", o.GRPCAddr)
			}
		}},
		{"runtime, watch root", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, func(t *testing.T, o *Settings) {
			want := RulesLayout{Dir: "/data/ratelimit", Load: rules.Options{Tree: true, DotFiles: true, Prefix: "config", MaxFileBytes: rules.DefaultMaxFileBytes, MaxTotalBytes: rules.DefaultMaxTotalBytes},
				Recursive: true, Root: "/data"}
			if got := o.Rules(); got != want || o.Config != "/data/ratelimit/config" {
				t.Errorf("layout %+v (dir %s), want %+v", got, o.Config, want)
			}
		}},
		{"runtime as Envoy Gateway sets it", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit",
			"RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_APPDIRECTORY": "rules",
			"MERGE_DOMAIN_CONFIG": "true"}, func(t *testing.T, o *Settings) {
			want := RulesLayout{Dir: "/data/ratelimit/rules", Load: rules.Options{Tree: true, MergeDomains: true,
				MaxFileBytes: rules.DefaultMaxFileBytes, MaxTotalBytes: rules.DefaultMaxTotalBytes}, Recursive: true}
			if got := o.Rules(); got != want {
				t.Errorf("layout %+v, want %+v", got, want)
			}
		}},
		{"runtime defaults", map[string]string{"RUNTIME_IGNOREDOTFILES": "true"}, func(t *testing.T, o *Settings) {
			if got := o.Rules(); got.Dir != "/srv/runtime_data/current" || got.Load.Prefix != "config" {
				t.Errorf("layout %+v", got)
			}
		}},
		{"key prefix", map[string]string{"CACHE_KEY_PREFIX": "team_a:"}, func(t *testing.T, o *Settings) {
			if o.KeyPrefix != "team_a" {
				t.Errorf("key prefix %q", o.KeyPrefix)
			}
		}},
		{"redis", map[string]string{"REDIS_URL": "/run/redis.sock", "REDIS_SOCKET_TYPE": "unix", "REDIS_SENTINEL_AUTH": "spw",
			"REDIS_TIMEOUT": "2s", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, func(t *testing.T, o *Settings) {
			c := o.Redis.Client
			if c.URL != "/run/redis.sock" || c.SocketType != "unix" || c.SentinelPassword != "spw" ||
				c.Conn.DialTimeout != 2*time.Second || c.Conn.ReadTimeout != 2*time.Second || c.Conn.WriteTimeout != 2*time.Second ||
				!o.Health.RequiresRedis {
				t.Errorf("redis options %+v", o)
			}
		}},
		{"modes", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
			"QUOTA_MODE": "true", "SHADOW_MODE": "true", "GRPC_MAX_CONNECTION_AGE": "1m", "GRPC_MAX_CONNECTION_AGE_GRACE": "5s",
			"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, func(t *testing.T, o *Settings) {
			if !o.Atomic || o.Headers.ResponseHeaders != rls.HeadersLegacy || !o.QuotaMode || !o.ShadowMode ||
				o.GRPCMaxConnectionAge != time.Minute || o.GRPCMaxConnectionAgeGrace != 5*time.Second || !o.Health.RequiresRules {
				t.Errorf("options %+v", o)
			}
		}},
		{"booleans that ask for nothing", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false",
			"LIMIT_RESPONSE_HEADERS_ENABLED": "0", "USE_STATSD": "false", "CONFIG_TYPE": "FILE", "BACKEND_TYPE": "redis",
			"REDIS_POOL_ON_EMPTY_BEHAVIOR": "wait", "EXPIRATION_JITTER_MAX_SECONDS": "0", "REDIS_URL": "127.0.0.1:6379",
			"REDIS_STARTUP_MAX_ELAPSED_TIME": "0", "REDIS_CLUSTER_PIPELINE_PARALLELISM": "4"}, func(t *testing.T, o *Settings) {
			if o.Atomic || o.Headers.ResponseHeaders != rls.HeadersOff || len(o.warnings) != 0 {
				t.Errorf("options %+v, warnings %v", o, o.warnings)
			}
		}},
		{"log level and format", map[string]string{"LOG_LEVEL": "TRACE", "LOG_FORMAT": "Text"}, func(t *testing.T, o *Settings) {
			if o.LogLevel != "debug" || o.LogFormat != LogText {
				t.Errorf("log %q %q", o.LogLevel, o.LogFormat)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := readRef(t, nil, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

// TestRefEnvFlagsWin: a flag, or its twin, wins over the reference's
// variable, which is then named in the warning.
func TestRefEnvFlagsWin(t *testing.T) {
	o, err := readRef(t, []string{"--http-addr", "127.0.0.1:1"}, map[string]string{"PORT": "9080", "CONFIG": "rules",
		"RUNTIME_ROOT": "/data", "KEY_PREFIX": "mine", "CACHE_KEY_PREFIX": "theirs"})
	if err != nil {
		t.Fatal(err)
	}
	if o.HTTPAddr != "127.0.0.1:1" || o.Config != "rules" || o.Rules().Load.Tree || o.KeyPrefix != "mine" {
		t.Errorf("options %+v", o)
	}
	w := strings.Join(o.warnings, "\n")
	for _, want := range []string{"PORT: not used, --http-addr gives", "RUNTIME_ROOT: not used, CONFIG gives", "CACHE_KEY_PREFIX: not used, KEY_PREFIX gives"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
}

// TestRefEnvWarnings: a variable FastLimit does not honour is named once
// in the warnings, with what FastLimit does instead.
func TestRefEnvWarnings(t *testing.T) {
	o, err := readRef(t, nil, map[string]string{"MEMCACHE_HOST_PORT": "m:11211", "USE_STATSD": "true",
		"EXPIRATION_JITTER_MAX_SECONDS": "300", "REDIS_PERSECOND": "true", "GRPC_SERVER_TLS_CA_CERT": "/ca.pem",
		"REDIS_URL": "redis:6379"})
	if err != nil {
		t.Fatal(err)
	}
	// USE_STATSD is honoured (--statsd): no warning.
	if len(o.warnings) != 4 {
		t.Errorf("warnings %q, want 4", o.warnings)
	}
	for _, want := range []string{"MEMCACHE_HOST_PORT: ignored: FastLimit has no memcache backend",
		"EXPIRATION_JITTER_MAX_SECONDS: ignored", "REDIS_PERSECOND: ignored", "GRPC_SERVER_TLS_CA_CERT: ignored"} {
		if !slices.ContainsFunc(o.warnings, func(w string) bool { return strings.HasPrefix(w, want) }) {
			t.Errorf("warnings %q lack %q", o.warnings, want)
		}
	}
}

// TestRefEnvErrors: a value FastLimit cannot honour is an error naming
// the variable, not a flag.
func TestRefEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BACKEND_TYPE": "memcache"}, `BACKEND_TYPE="memcache": only`},
		{map[string]string{"REDIS_POOL_ON_EMPTY_BEHAVIOR": "create"}, `REDIS_POOL_ON_EMPTY_BEHAVIOR="create"`},
		{map[string]string{"PORT": "http"}, `PORT="http": not a port number`},
		{map[string]string{"DEBUG_PORT": "70000"}, `DEBUG_PORT="70000": not a port number`},
		{map[string]string{"RUNTIME_WATCH_ROOT": "sometimes"}, `RUNTIME_WATCH_ROOT="sometimes": not a boolean`},
		{map[string]string{"REDIS_TIMEOUT": "10"}, `REDIS_TIMEOUT="10": not a duration`},
		{map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "yes"}, `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="yes": not a boolean`},
		{map[string]string{"LOG_LEVEL": "verbose"}, `LOG_LEVEL="verbose"`},
		{map[string]string{"LOG_FORMAT": "logfmt"}, `LOG_FORMAT="logfmt"`},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "1 day"}, `GRPC_MAX_CONNECTION_AGE="1 day"`},
	} {
		_, err := readRef(t, nil, tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to contain %q", tc.env, err, tc.want)
		}
	}
}

// TestRefEnvValidationNamesVariable: a mapped value found bad after
// parsing is reported under the variable that gave it.
func TestRefEnvValidationNamesVariable(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CACHE_KEY_PREFIX": "{team}"}, "CACHE_KEY_PREFIX: "},
		{map[string]string{"NEAR_LIMIT_RATIO": "1.5"}, "NEAR_LIMIT_RATIO: 1.5 is not in (0, 1]"},
		{map[string]string{"KEY_PREFIX": "a}"}, "KEY_PREFIX: "},
	} {
		o, err := readRef(t, nil, tc.env)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: validate = %v, want it to start with %q", tc.env, err, tc.want)
		}
	}
	o, err := readRef(t, []string{"--near-limit-ratio", "2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), "--near-limit-ratio: ") {
		t.Errorf("validate = %v, want it to name the flag", err)
	}
}
