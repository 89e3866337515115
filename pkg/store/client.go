package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis deployment types, as envoyproxy/ratelimit's REDIS_TYPE names them.
// ClientOptions.Type accepts them in any case.
const (
	TypeSingle   = "single"
	TypeCluster  = "cluster"
	TypeSentinel = "sentinel"
)

// ClientOptions describe a Redis deployment and how to reach it. Zero
// fields take go-redis' defaults, except those NewClient always sets.
type ClientOptions struct {
	// Type is TypeSingle (when empty), TypeCluster or TypeSentinel.
	Type string
	// URL is envoyproxy/ratelimit's REDIS_URL:
	//   single:   redis://[user:password@]host:port[/db], rediss://… or host:port
	//   cluster:  seed nodes, host:port,host:port,…
	//   sentinel: MASTER_NAME,host:port,… (the sentinels)
	URL string
	// Username and Password authenticate to the nodes, over a URL's.
	Username, Password string
	// SentinelPassword authenticates to the sentinels.
	SentinelPassword string
	// SocketType is REDIS_SOCKET_TYPE for a single server: tcp (tcp4,
	// tcp6) or unix, any case; empty takes it from the URL (a path or
	// unix://[user:password@]/path[?db=N] is unix). Others use TCP.
	SocketType string
	// TLS configures TLS to every node (and to the sentinels).
	TLS TLSOptions
	// Conn applies to every connection, on every node.
	Conn ConnOptions
}

// NewClient returns a client for the deployment o describes: a
// *redis.Client (single), a *redis.ClusterClient (cluster) or a failover
// *redis.Client (sentinel). It does no I/O. The client never re-sends a
// script that may have run (a Cluster one still follows MOVED and ASK),
// reloads a Cluster's slot map after a connection error, and honours
// context deadlines (docs/design.md, "Never sent twice"). Its errors never
// hold a password.
func NewClient(o ClientOptions) (redis.UniversalClient, error) {
	typ := strings.ToLower(strings.TrimSpace(o.Type))
	if typ == "" {
		typ = TypeSingle
	}
	switch typ {
	case TypeSingle:
		return newSingle(o)
	case TypeCluster:
		return newCluster(o)
	case TypeSentinel:
		return newSentinel(o)
	}
	return nil, fmt.Errorf("redis type %q: want single, cluster or sentinel", o.Type)
}

// String describes o for logs: its type and its URL without a password.
func (o ClientOptions) String() string {
	typ := strings.ToLower(strings.TrimSpace(o.Type))
	if typ == "" {
		typ = TypeSingle
	}
	if typ == TypeSingle {
		return typ + " " + RedactAddr(o.URL)
	}
	parts := strings.Split(o.URL, ",")
	for i, p := range parts {
		parts[i] = RedactAddr(p)
	}
	return typ + " " + strings.Join(parts, ",")
}

// RedactAddr returns s, a URL or an address, with its credentials hidden:
// RedactURL for a URL; for anything else that holds them
// ("user:password@host:port") all before the last '@' becomes "xxxxx".
func RedactAddr(s string) string {
	if strings.Contains(s, "://") {
		return RedactURL(s)
	}
	if i := strings.LastIndex(s, "@"); i >= 0 {
		return "xxxxx" + s[i:]
	}
	return s
}

func newSingle(o ClientOptions) (redis.UniversalClient, error) {
	opt, err := singleOptions(o)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(opt)
	c.AddHook(noRetryHook{})
	return c, nil
}

// singleOptions maps o, of type single, onto go-redis' options.
func singleOptions(o ClientOptions) (*redis.Options, error) {
	raw := strings.TrimSpace(o.URL)
	if raw == "" {
		return nil, errors.New("redis URL is empty")
	}
	network, err := socketType(o.SocketType, raw)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		return unixOptions(o, raw)
	}
	if !strings.Contains(raw, "://") {
		if err := checkHostPort(raw); err != nil {
			return nil, fmt.Errorf("redis address %q: %w", RedactAddr(raw), err)
		}
		raw = "redis://" + raw
	}
	opt, err := RedisOptionsFromURL(raw, o.Conn)
	if err != nil {
		return nil, err
	}
	opt.Network = network
	if o.Username != "" {
		opt.Username = o.Username
	}
	if o.Password != "" {
		opt.Password = o.Password
	}
	host, _, _ := net.SplitHostPort(opt.Addr)
	tlsOn := o.TLS.Enabled || opt.TLSConfig != nil
	if opt.TLSConfig, err = o.TLS.config(tlsOn, host); err != nil {
		return nil, err
	}
	return opt, nil
}

// socketType returns the network to dial a single server on: the socket
// type given, or the one the URL implies.
func socketType(typ, url string) (string, error) {
	isPath := strings.HasPrefix(url, "/") || strings.HasPrefix(url, "unix://")
	switch t := strings.ToLower(strings.TrimSpace(typ)); t {
	case "":
		if isPath {
			return "unix", nil
		}
		return "tcp", nil
	case "unix":
		if strings.Contains(url, "://") && !strings.HasPrefix(url, "unix://") {
			return "", fmt.Errorf("redis socket type unix: %q is no socket path", RedactAddr(url))
		}
		return t, nil
	case "tcp", "tcp4", "tcp6":
		if isPath {
			return "", fmt.Errorf("redis socket type %s: %q is a socket path, not an address", typ, RedactAddr(url))
		}
		return t, nil
	}
	return "", fmt.Errorf("redis socket type %q: want tcp or unix", typ)
}

// unixOptions maps o, a single server on a unix socket at url (a path or a
// unix:// URL), onto go-redis' options.
func unixOptions(o ClientOptions, url string) (*redis.Options, error) {
	if !strings.Contains(url, "://") {
		url = "unix://" + url
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse redis URL %q: %s", RedactURL(url), redactPassword(err.Error(), url))
	}
	if o.TLS.Enabled || o.TLS.set() {
		return nil, errors.New("redis TLS over a unix socket is not supported")
	}
	o.Conn.apply(opt)
	if o.Username != "" {
		opt.Username = o.Username
	}
	if o.Password != "" {
		opt.Password = o.Password
	}
	return opt, nil
}

// redactPassword hides the password of url wherever msg quotes it.
func redactPassword(msg, url string) string {
	rest, ok := strings.CutPrefix(url, "unix://")
	if !ok {
		return msg
	}
	userinfo, _, found := strings.Cut(rest, "@")
	if !found {
		return msg
	}
	if _, pw, ok := strings.Cut(userinfo, ":"); ok && pw != "" {
		return strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}

func newCluster(o ClientOptions) (redis.UniversalClient, error) {
	seeds, err := splitAddrs("cluster seed", o.URL)
	if err != nil {
		return nil, err
	}
	u, err := o.universal(seeds)
	if err != nil {
		return nil, err
	}
	c := redis.NewClusterClient(u.Cluster())
	c.AddHook(clusterHook{c: c})
	return c, nil
}

func newSentinel(o ClientOptions) (redis.UniversalClient, error) {
	master, rest, _ := strings.Cut(o.URL, ",")
	master = strings.TrimSpace(master)
	if master == "" || strings.Contains(master, ":") {
		return nil, fmt.Errorf("redis sentinel URL %q: want MASTER_NAME,host:port[,host:port…]", o.String())
	}
	sentinels, err := splitAddrs("sentinel", rest)
	if err != nil {
		return nil, err
	}
	u, err := o.universal(sentinels)
	if err != nil {
		return nil, err
	}
	u.MasterName, u.SentinelPassword = master, o.SentinelPassword
	c := redis.NewFailoverClient(u.Failover())
	c.AddHook(noRetryHook{})
	return c, nil
}

// universal maps what a cluster's and a sentinel's clients share onto
// go-redis' options, addrs being the seeds or the sentinels.
func (o ClientOptions) universal(addrs []string) (*redis.UniversalOptions, error) {
	tlsCfg, err := o.TLS.config(o.TLS.Enabled, "")
	if err != nil {
		return nil, err
	}
	return &redis.UniversalOptions{
		Addrs:                 addrs,
		Username:              o.Username,
		Password:              o.Password,
		TLSConfig:             tlsCfg,
		PoolSize:              o.Conn.PoolSize,
		DialTimeout:           or(o.Conn.DialTimeout, DefaultDialTimeout),
		ReadTimeout:           o.Conn.ReadTimeout,
		WriteTimeout:          o.Conn.WriteTimeout,
		ClientName:            o.Conn.Name,
		MaxActiveConns:        o.Conn.MaxConns,
		PipelinePoolSize:      o.Conn.pipelinePool(),
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	}, nil
}

// splitAddrs parses a comma-separated host:port list.
func splitAddrs(what, list string) ([]string, error) {
	var addrs []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if err := checkHostPort(a); err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, RedactAddr(a), err)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no %s address: want host:port[,host:port…]", what)
	}
	return addrs, nil
}

func checkHostPort(addr string) error {
	if strings.Contains(addr, "://") || strings.Contains(addr, "@") {
		return errors.New("want host:port")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return errors.New("want host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

// noRetryHook marks every pipelined command NoRetry, so that go-redis never
// re-sends one that may have run; redirects are still followed.
type noRetryHook struct{}

func (noRetryHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (noRetryHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (noRetryHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return next(ctx, noRetry(cmds))
	}
}

// noRetryCmd is the command it wraps, marked NoRetry.
type noRetryCmd struct{ redis.Cmder }

func (noRetryCmd) NoRetry() bool { return true }

func noRetry(cmds []redis.Cmder) []redis.Cmder {
	out := make([]redis.Cmder, len(cmds))
	for i, c := range cmds {
		if c.NoRetry() {
			out[i] = c
		} else {
			out[i] = noRetryCmd{c}
		}
	}
	return out
}

// clusterHook is noRetryHook plus a reload of the slot map after a
// connection error: a dead master answers no MOVED.
type clusterHook struct {
	noRetryHook
	c *redis.ClusterClient
}

func (h clusterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		var err error
		if isScript(cmd) { // PING, SCRIPT LOAD (fanned out) may retry
			err = next(ctx, noRetryCmd{cmd})
		} else {
			err = next(ctx, cmd)
		}
		if isConnError(err) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

func isScript(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return true
	}
	return false
}

func (h clusterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, noRetry(cmds))
		for _, c := range cmds {
			if isConnError(c.Err()) { // in the background, at most every 200 ms
				h.c.ReloadState(ctx)
				break
			}
		}
		return err
	}
}

// isConnError reports an error that is not a Redis reply: the connection
// failed, or a deadline passed.
func isConnError(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var rerr redis.Error
	return !errors.As(err, &rerr)
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
