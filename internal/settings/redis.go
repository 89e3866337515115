package settings

import (
	"errors"
	"runtime"
	"strings"

	"github.com/fastlimit/fastlimit/pkg/store"
)

// Redis configures the Redis deployment at --redis-url: what it is and
// how to reach it.
type Redis struct {
	Type             string
	SocketType       string // tcp or unix; empty: from the URL
	Username         string
	Password         string
	Auth             string // deprecated --redis-auth, REDIS_AUTH: password or user:password
	SentinelPassword string

	TLS                         bool
	TLSCA                       string
	TLSCert                     string
	TLSKey                      string
	TLSServerName               string
	TLSSkipVerify               bool
	TLSSkipHostnameVerification bool
}

// set reports whether any setting other than the default type is given.
func (o *Redis) set() bool {
	return !strings.EqualFold(o.Type, store.TypeSingle) || o.SocketType != "" || o.Username != "" || o.Password != "" || o.Auth != "" ||
		o.SentinelPassword != "" || o.TLS || o.TLSCA != "" || o.TLSCert != "" || o.TLSKey != "" ||
		o.TLSServerName != "" || o.TLSSkipVerify || o.TLSSkipHostnameVerification
}

// ClientOptions maps the settings onto store.ClientOptions. It does not
// validate them; store.NewClient does.
func (o *Redis) ClientOptions(url string, conn store.ConnOptions) store.ClientOptions {
	c := store.ClientOptions{
		Type:             o.Type,
		SocketType:       o.SocketType,
		URL:              url,
		Username:         o.Username,
		Password:         o.Password,
		SentinelPassword: o.SentinelPassword,
		Conn:             conn,
		TLS: store.TLSOptions{
			Enabled:                  o.TLS,
			CAFile:                   o.TLSCA,
			CertFile:                 o.TLSCert,
			KeyFile:                  o.TLSKey,
			ServerName:               o.TLSServerName,
			InsecureSkipVerify:       o.TLSSkipVerify,
			SkipHostnameVerification: o.TLSSkipHostnameVerification,
		},
	}
	if c.Password == "" && o.Auth != "" {
		// As envoyproxy/ratelimit reads REDIS_AUTH.
		if user, pass, ok := strings.Cut(o.Auth, ":"); ok {
			c.Password = pass
			if c.Username == "" {
				c.Username = user
			}
		} else {
			c.Password = o.Auth
		}
	}
	return c
}

// validate checks what can be checked without a URL.
func (o *Redis) validate(url string) error {
	if url == "" && o.set() {
		return errors.New("--redis-* settings (REDIS_* variables) given without --redis-url (REDIS_URL): " +
			"without it FastLimit runs on its embedded store, which needs none")
	}
	return nil
}

// RedisPoolConns is the Redis connection pool's size per server reached:
// --redis-pool-size, or 10 per CPU when it is 0.
func (s *Settings) RedisPoolConns() int {
	if s.RedisPoolSize > 0 {
		return s.RedisPoolSize
	}
	return 10 * runtime.GOMAXPROCS(0)
}
