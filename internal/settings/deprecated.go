package settings

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// flagAliases are old spellings of flags, most of them envoyproxy/
// ratelimit's variable names: each sets its flag, with a warning. The
// reference's variables themselves are read through refVars, not as
// these aliases' twins.
var flagAliases = []struct{ old, flag string }{
	{"local-cache-size-in-bytes", "over-limit-cache-bytes"},
	{"redis-tls-cacert", "redis-tls-ca"},
	{"redis-tls-client-cert", "redis-tls-cert"},
	{"redis-tls-client-key", "redis-tls-key"},
	{"redis-health-check-active-connection", "health-requires-redis"},
	{"healthy-with-at-least-one-config-loaded", "health-requires-rules"},
	{"force-start-without-initial-config", "xds-start-without-rules"},
	{"config-grpc-xds-node-id", "xds-node-id"},
	{"config-grpc-xds-node-metadata", "xds-node-metadata"},
	{"config-grpc-xds-server-url", "xds-server"},
	{"config-grpc-xds-client-additional-headers", "xds-headers"},
	{"config-grpc-xds-server-use-tls", "xds-tls"},
	{"config-grpc-xds-client-tls-cert", "xds-tls-cert"},
	{"config-grpc-xds-client-tls-key", "xds-tls-key"},
	{"config-grpc-xds-server-tls-cacert", "xds-tls-ca"},
	{"config-grpc-xds-server-tls-san", "xds-tls-server-name"},
	{"xds-client-backoff-initial-interval", "xds-backoff-initial"},
	{"xds-client-backoff-max-interval", "xds-backoff-max"},
	{"xds-client-backoff-random-factor", "xds-backoff-factor"},
	{"xds-client-backoff-jitter", "xds-backoff-jitter"},
	{"config-grpc-xds-server-connect-retry-interval", "xds-connect-retry-interval"},
	{"xds-client-max-msg-size-in-bytes", "xds-max-response-bytes"},
	{"grpc-server-use-tls", "grpc-tls"},
	{"grpc-server-tls-cert", "grpc-tls-cert"},
	{"grpc-server-tls-key", "grpc-tls-key"},
	{"grpc-client-tls-cacert", "grpc-tls-client-ca"},
	{"grpc-client-tls-san", "grpc-tls-client-san"},
	{"tracing-enabled", "tracing"},
	{"use-prometheus", "prometheus"},
	{"use-statsd", "statsd"},
	{"use-dog-statsd", "dogstatsd"},
	{"use-dog-statsd-mogrifiers", "dogstatsd-mogrifiers"},
	{"stats-flush-interval", "statsd-flush-interval"},
	{"extra-tags", "statsd-tags"},
	{"disable-stats", "stats-off"},
}

// aliases maps each old spelling to its flag.
var aliases = func() map[string]string {
	m := make(map[string]string, len(flagAliases))
	for _, a := range flagAliases {
		m[a.old] = a.flag
	}
	return m
}()

// canonical is the flag that name, a flag or an alias, sets.
func canonical(name string) string {
	if f := aliases[name]; f != "" {
		return f
	}
	return name
}

// deprecatedUse says, for each deprecated flag that is not an alias, what
// its warning says after its name.
var deprecatedUse = map[string]string{
	"redis-auth":  "is deprecated: use --redis-password and --redis-username",
	"redis-conns": "is deprecated and has no effect: every Redis is reached through go-redis' pool, requests merged into script calls (--redis-batches)",
}

func addDeprecatedFlags(fs *flag.FlagSet, s *Settings) {
	fs.StringVar(&s.Redis.Auth, "redis-auth", "",
		"deprecated: password or user:password, used when --redis-password is empty; use --redis-password and --redis-username")
	fs.Int("redis-conns", 0,
		"deprecated: no effect, every Redis is reached through go-redis' pool, requests merged into script calls (--redis-batches)")
	for _, a := range flagAliases {
		fs.Var(fs.Lookup(a.flag).Value, a.old, "deprecated: use --"+a.flag)
	}
}

// deprecations are the warnings about the deprecated flags src shows
// given. A reference variable is no deprecated flag's use: REDIS_AUTH
// passes without a word.
func deprecations(src map[string]string) []string {
	var w []string
	for _, a := range flagAliases {
		if src[a.flag] == "--"+a.old {
			w = append(w, fmt.Sprintf("--%s is deprecated: use --%s", a.old, a.flag))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(deprecatedUse)) {
		if given := src[name]; given != "" && (strings.HasPrefix(given, "--") || !isRefVar(given)) {
			w = append(w, given+" "+deprecatedUse[name])
		}
	}
	return w
}
