package settings

import (
	"fmt"
	"io/fs"
	"os"
)

// RefDefaultRedisSocket is where envoyproxy/ratelimit looks for Redis when
// REDIS_URL is unset (its REDIS_URL default, twemproxy's socket).
const RefDefaultRedisSocket = "/var/run/nutcracker/ratelimit.sock"

// isSocket reports whether path is a unix socket; tests replace it.
var isSocket = func(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}

// refEnvironment reports whether any of the reference's variables is set.
func refEnvironment(m *refMapper) bool {
	for _, v := range refVars {
		if m.get(v.name) != "" {
			return true
		}
	}
	return false
}

// applyRedisDefault follows the reference when REDIS_URL is unset in its
// environment: Redis on its default socket if it exists, else the
// embedded store with a warning that each replica counts alone.
func applyRedisDefault(m *refMapper) error {
	o := m.o
	if o.RedisURL != "" || o.src["redis-url"] != "" || !refEnvironment(m) {
		return nil
	}
	st := m.get("REDIS_SOCKET_TYPE")
	if (st == "" || st == "unix") && isSocket(RefDefaultRedisSocket) {
		if err := m.set("redis-url", RefDefaultRedisSocket, "REDIS_URL (unset: the reference's default socket)"); err != nil {
			return err
		}
		o.notes = append(o.notes, "REDIS_URL is unset: Redis on the reference's default socket "+RefDefaultRedisSocket)
		return nil
	}
	o.warnings = append(o.warnings, fmt.Sprintf("REDIS_URL: unset, and no Redis socket at %s (the reference's default): "+
		"FastLimit runs on its embedded in-memory store, where each replica counts alone, so that N replicas let "+
		"N times each limit through; set REDIS_URL to share the counters", RefDefaultRedisSocket))
	return nil
}

// refOnlyEnvironment reports whether a variable only the reference reads
// is set: not one that is also a FastLimit flag's twin (REDIS_URL,
// LOG_LEVEL), which FastLimit's own deployments set.
func refOnlyEnvironment(m *refMapper) bool {
	for _, v := range refVars {
		if m.get(v.name) != "" && !(v.how == refTwin && EnvName(v.flag) == v.name) {
			return true
		}
	}
	return false
}

// applyStatsdDefault follows the reference's USE_STATSD default (true)
// when STATSD_HOST or STATSD_PORT is set, unless another output was
// chosen; a note says what was decided. With neither set, in the
// reference's environment, a warning says that the stats the reference
// would send to localhost:8125 are not sent (docs/migrating.md says why).
func applyStatsdDefault(m *refMapper) error {
	o := m.o
	host, port := m.get("STATSD_HOST"), m.get("STATSD_PORT")
	if m.get("USE_STATSD") != "" || o.src["statsd"] != "" {
		return nil
	}
	if host == "" && port == "" {
		rs := &o.RefStats
		if refOnlyEnvironment(m) && !rs.DisableStats && !rs.UsePrometheus && !rs.UseDogStatsd {
			o.warnings = append(o.warnings, "USE_STATSD: unset; the reference's default (true) sends its stats to statsd at "+
				"localhost:8125, FastLimit sends none: USE_STATSD=true sends them (STATSD_HOST and STATSD_PORT say where), "+
				"USE_STATSD=false says none are wanted")
		}
		return nil
	}
	where := fmt.Sprintf("%s:%d", o.RefStats.StatsdHost, o.RefStats.StatsdPort)
	switch {
	case o.RefStats.DisableStats:
		o.notes = append(o.notes, "USE_STATSD is unset and DISABLE_STATS is true: no stats to statsd at "+where)
	case o.RefStats.UsePrometheus || o.RefStats.UseDogStatsd:
		o.notes = append(o.notes, "USE_STATSD is unset: envoyproxy/ratelimit's stats go to USE_PROMETHEUS or USE_DOG_STATSD, not statsd at "+where)
	default:
		from := "STATSD_HOST"
		if host == "" {
			from = "STATSD_PORT"
		}
		if err := m.set("statsd", "true", "USE_STATSD (unset: the reference's default, true, with "+from+")"); err != nil {
			return err
		}
		o.notes = append(o.notes, "USE_STATSD is unset and "+from+" is set: sending envoyproxy/ratelimit's stats to statsd at "+
			where+", as the reference does by default; USE_STATSD=false stops it")
	}
	return nil
}
