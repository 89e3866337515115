package main

import (
	"errors"
	"flag"
	"strings"

	"github.com/fastlimit/fastlimit/pkg/store"
)

// redisOptions configure the Redis deployment FastLimit talks to. --redis-url
// (options.redisURL) says where it is; these say what it is and how to
// reach it. The names follow envoyproxy/ratelimit's REDIS_* settings.
type redisOptions struct {
	typ              string
	socketType       string // tcp or unix; empty: from the URL
	username         string
	password         string
	auth             string // REDIS_AUTH: password or user:password
	sentinelPassword string

	tls           bool
	tlsCA         string
	tlsCert       string
	tlsKey        string
	tlsServerName string
	tlsSkipVerify bool

	// envoyproxy/ratelimit's names for the TLS files, used when ours are
	// empty, so that its REDIS_TLS_* variables keep working.
	refTLSCA           string
	refTLSCert         string
	refTLSKey          string
	refTLSSkipHostname bool
}

func addRedisFlags(fs *flag.FlagSet, o *redisOptions) {
	fs.StringVar(&o.typ, "redis-type", store.TypeSingle,
		"Redis deployment: single, cluster (--redis-url host:port,host:port,...) or sentinel (--redis-url MASTER_NAME,host:port,...); any case")
	fs.StringVar(&o.socketType, "redis-socket-type", "",
		"single Redis: tcp, or unix with --redis-url a socket path (/run/redis.sock or unix:///run/redis.sock); empty: from --redis-url")
	fs.StringVar(&o.username, "redis-username", "", "Redis ACL user (overrides the URL's)")
	fs.StringVar(&o.password, "redis-password", "", "Redis password (overrides the URL's); never logged")
	fs.StringVar(&o.auth, "redis-auth", "",
		"envoyproxy/ratelimit's REDIS_AUTH: password or user:password, used when --redis-password is empty")
	fs.StringVar(&o.sentinelPassword, "redis-sentinel-password", "", "password of the sentinels themselves (their requirepass)")
	fs.BoolVar(&o.tls, "redis-tls", false, "connect to Redis (and the sentinels) over TLS; a rediss:// URL implies it")
	fs.StringVar(&o.tlsCA, "redis-tls-ca", "", "PEM file of the CAs that sign Redis' certificates (default: the system's)")
	fs.StringVar(&o.tlsCert, "redis-tls-cert", "", "PEM client certificate, for servers with tls-auth-clients")
	fs.StringVar(&o.tlsKey, "redis-tls-key", "", "PEM key of --redis-tls-cert")
	fs.StringVar(&o.tlsServerName, "redis-tls-server-name", "", "name Redis' certificates must hold (default: the host dialled)")
	fs.BoolVar(&o.tlsSkipVerify, "redis-tls-skip-verify", false, "accept any Redis certificate (insecure)")
	fs.StringVar(&o.refTLSCA, "redis-tls-cacert", "", "envoyproxy/ratelimit's name for --redis-tls-ca")
	fs.StringVar(&o.refTLSCert, "redis-tls-client-cert", "", "envoyproxy/ratelimit's name for --redis-tls-cert")
	fs.StringVar(&o.refTLSKey, "redis-tls-client-key", "", "envoyproxy/ratelimit's name for --redis-tls-key")
	fs.BoolVar(&o.refTLSSkipHostname, "redis-tls-skip-hostname-verification", false,
		"verify Redis' certificate chain but not the name it is issued to (envoyproxy/ratelimit's setting)")
}

// set reports whether any setting other than the default type is given.
func (o *redisOptions) set() bool {
	return !strings.EqualFold(o.typ, store.TypeSingle) || o.socketType != "" || o.username != "" || o.password != "" || o.auth != "" ||
		o.sentinelPassword != "" || o.tls || o.tlsCA != "" || o.tlsCert != "" || o.tlsKey != "" ||
		o.tlsServerName != "" || o.tlsSkipVerify || o.refTLSCA != "" || o.refTLSCert != "" || o.refTLSKey != "" ||
		o.refTLSSkipHostname
}

// clientOptions maps the settings onto store.ClientOptions. It does not
// validate them; store.NewClient does.
func (o *redisOptions) clientOptions(url string, conn store.ConnOptions) store.ClientOptions {
	c := store.ClientOptions{
		Type:             o.typ,
		SocketType:       o.socketType,
		URL:              url,
		Username:         o.username,
		Password:         o.password,
		SentinelPassword: o.sentinelPassword,
		Conn:             conn,
		TLS: store.TLSOptions{
			Enabled:                  o.tls,
			CAFile:                   or(o.tlsCA, o.refTLSCA),
			CertFile:                 or(o.tlsCert, o.refTLSCert),
			KeyFile:                  or(o.tlsKey, o.refTLSKey),
			ServerName:               o.tlsServerName,
			InsecureSkipVerify:       o.tlsSkipVerify,
			SkipHostnameVerification: o.refTLSSkipHostname,
		},
	}
	if c.Password == "" && o.auth != "" {
		// As envoyproxy/ratelimit reads REDIS_AUTH.
		if user, pass, ok := strings.Cut(o.auth, ":"); ok {
			c.Password = pass
			if c.Username == "" {
				c.Username = user
			}
		} else {
			c.Password = o.auth
		}
	}
	return c
}

// validate checks what can be checked without a URL.
func (o *redisOptions) validate(url string) error {
	if url == "" && o.set() {
		return errors.New("--redis-* settings (REDIS_* variables) given without --redis-url (REDIS_URL): " +
			"without it FastLimit runs on its embedded store, which needs none")
	}
	return nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
