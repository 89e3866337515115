package settings

import (
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/pkg/rls"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// refMapping sets FastLimit flags from reference variables.
type refMapping struct {
	vars  []string // the variables it reads
	flags []string // the flags it may set
	apply func(m *refMapper) error
}

var refMappings = []refMapping{
	{vars: []string{"HOST", "PORT"}, flags: []string{"http-addr"},
		apply: mapHostPort("http-addr", "HOST", "PORT", "", refHTTPPort)},
	{vars: []string{"GRPC_UDS", "GRPC_HOST", "GRPC_PORT"}, flags: []string{"grpc-addr"}, apply: mapGRPCAddr},
	{vars: []string{"DEBUG_HOST", "DEBUG_PORT"}, flags: []string{"admin-addr"},
		apply: mapHostPort("admin-addr", "DEBUG_HOST", "DEBUG_PORT", "127.0.0.1", refDebugPort)},
	{vars: []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT"},
		flags: []string{"config"}, apply: mapRuntime},
	{vars: []string{"CACHE_KEY_PREFIX"}, flags: []string{"key-prefix"}, apply: mapKeyPrefix},
	{vars: []string{"REDIS_SENTINEL_AUTH"}, flags: []string{"redis-sentinel-password"},
		apply: func(m *refMapper) error {
			return m.set("redis-sentinel-password", m.get("REDIS_SENTINEL_AUTH"), "REDIS_SENTINEL_AUTH")
		}},
	{vars: []string{"REDIS_TIMEOUT"}, flags: []string{"redis-dial-timeout", "redis-read-timeout", "redis-write-timeout"}, apply: mapRedisTimeout},
	{vars: []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, flags: []string{"atomic"},
		apply: mapBool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "atomic", "true")},
	{vars: []string{"LIMIT_RESPONSE_HEADERS_ENABLED"}, flags: []string{"response-headers"},
		apply: mapBool("LIMIT_RESPONSE_HEADERS_ENABLED", "response-headers", rls.HeadersLegacy)},
}

// applyRefEnv applies the reference's variables to o, whose flags fs has
// parsed. It returns an error naming every variable refused.
func applyRefEnv(o *Settings, fs *flag.FlagSet, getenv func(string) string) error {
	if o.src == nil {
		o.src = map[string]string{}
	}
	m := &refMapper{o: o, fs: fs, getenv: getenv}
	var errs []string
	for _, v := range refVars {
		val := m.get(v.name)
		if val == "" || (v.how != refWarned && v.how != refRefused) || (v.fine.match != nil && v.fine.match(val)) {
			continue
		}
		if v.how == refWarned {
			o.warnings = append(o.warnings, v.name+": "+v.note)
		} else {
			errs = append(errs, fmt.Sprintf("%s=%q: %s", v.name, val, v.note))
		}
	}
	for _, mp := range refMappings {
		if err := m.apply(mp); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, def := range []func(*refMapper) error{applyRedisDefault, applyStatsdDefault} {
		if err := def(m); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("environment: %s", strings.Join(errs, "; "))
	}
	return nil
}

// refMapper applies mappings to the options.
type refMapper struct {
	o      *Settings
	fs     *flag.FlagSet
	getenv func(string) string
}

func (m *refMapper) get(name string) string { return strings.TrimSpace(m.getenv(name)) }

// apply runs mp unless every flag it sets was given; then its variables
// set are named in the warning.
func (m *refMapper) apply(mp refMapping) error {
	var set []string
	for _, v := range mp.vars {
		if m.get(v) != "" {
			set = append(set, v)
		}
	}
	if len(set) == 0 {
		return nil
	}
	for _, f := range mp.flags {
		if m.o.src[f] == "" {
			return mp.apply(m)
		}
	}
	m.o.warnings = append(m.o.warnings, fmt.Sprintf("%s: not used, %s gives the setting",
		strings.Join(set, ", "), m.o.src[mp.flags[0]]))
	return nil
}

// set sets flag to value for the variable from, unless flag was given.
func (m *refMapper) set(flag, value, from string) error {
	if m.o.src[flag] != "" {
		return nil
	}
	if err := m.fs.Set(flag, value); err != nil {
		return fmt.Errorf("%s=%q: %w", from, m.get(from), err)
	}
	m.o.src[flag] = from
	return nil
}

// bool reads the boolean variable name, def when unset.
func (m *refMapper) bool(name string, def bool) (bool, error) {
	v := m.get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: not a boolean", name, v)
	}
	return b, nil
}

// port reads the port variable name, def when unset.
func (m *refMapper) port(name, def string) (string, error) {
	v := m.get(name)
	if v == "" {
		return def, nil
	}
	if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%s=%q: not a port number", name, v)
	}
	return v, nil
}

// mapHostPort maps a host and a port variable onto an address flag.
func mapHostPort(flag, hostVar, portVar, defHost, defPort string) func(m *refMapper) error {
	return func(m *refMapper) error {
		port, err := m.port(portVar, defPort)
		if err != nil {
			return err
		}
		host := m.get(hostVar)
		if host == "" {
			host = defHost
		}
		from := portVar
		if m.get(hostVar) != "" {
			from = hostVar
		}
		return m.set(flag, net.JoinHostPort(host, port), from)
	}
}

func mapGRPCAddr(m *refMapper) error {
	if uds := m.get("GRPC_UDS"); uds != "" {
		return m.set("grpc-addr", "unix:"+uds, "GRPC_UDS")
	}
	return mapHostPort("grpc-addr", "GRPC_HOST", "GRPC_PORT", "", refGRPCPort)(m)
}

// mapRuntime maps the RUNTIME_* variables onto the rules layout, found as
// the reference finds files (rules.Options.Tree).
func mapRuntime(m *refMapper) error {
	ignoreDot, err := m.bool("RUNTIME_IGNOREDOTFILES", false)
	if err != nil {
		return err
	}
	watchRoot, err := m.bool("RUNTIME_WATCH_ROOT", true)
	if err != nil {
		return err
	}
	root, sub, app := m.get("RUNTIME_ROOT"), m.get("RUNTIME_SUBDIRECTORY"), m.get("RUNTIME_APPDIRECTORY")
	if root == "" {
		root = refRuntimeRoot
	}
	if app == "" {
		app = refAppDir
	}
	appDir := filepath.Join(root, sub, app)
	l := RulesLayout{Dir: appDir, Load: rules.Options{Tree: true, DotFiles: !ignoreDot}, Recursive: true}
	if watchRoot {
		l.Dir, l.Load.Prefix, l.Root = filepath.Join(root, sub), app, root
	}
	m.o.layout, m.o.Config = l, appDir
	m.o.src["config"] = "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY"
	return nil
}

// mapKeyPrefix maps CACHE_KEY_PREFIX onto --key-prefix, one trailing ':'
// dropped: FastLimit puts a ':' after the prefix.
func mapKeyPrefix(m *refMapper) error {
	p := strings.TrimSuffix(m.get("CACHE_KEY_PREFIX"), ":")
	if p == "" {
		return nil
	}
	return m.set("key-prefix", p, "CACHE_KEY_PREFIX")
}

// mapRedisTimeout maps REDIS_TIMEOUT onto the dial, read and write
// timeouts.
func mapRedisTimeout(m *refMapper) error {
	v := m.get("REDIS_TIMEOUT")
	if _, err := time.ParseDuration(v); err != nil {
		return fmt.Errorf("REDIS_TIMEOUT=%q: not a duration (such as 10s)", v)
	}
	for _, f := range []string{"redis-dial-timeout", "redis-read-timeout", "redis-write-timeout"} {
		if err := m.set(f, v, "REDIS_TIMEOUT"); err != nil {
			return err
		}
	}
	return nil
}

// mapBool maps a boolean variable onto flag, set to value when it is true.
func mapBool(name, flag, value string) func(m *refMapper) error {
	return func(m *refMapper) error {
		on, err := m.bool(name, false)
		if err != nil || !on {
			return err
		}
		return m.set(flag, value, name)
	}
}
