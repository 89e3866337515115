package settings

import (
	"errors"
	"runtime"
	"strings"

	"github.com/fastlimit/fastlimit/pkg/store"
)

// Redis configures the store on Redis: the deployment at --redis-url and
// how to reach it (Client, store.NewClient's options), and its script
// calls (Store, store.NewRedis'). Without a URL the server runs on its
// embedded store.
type Redis struct {
	Client store.ClientOptions
	Store  store.RedisOptions
	Auth   string // deprecated --redis-auth, REDIS_AUTH: password or user:password
}

// set reports whether any deployment setting other than the default type
// is given.
func (o *Redis) set() bool {
	c := &o.Client
	return !strings.EqualFold(c.Type, store.TypeSingle) || c.SocketType != "" || c.Username != "" || c.Password != "" || o.Auth != "" ||
		c.SentinelPassword != "" || c.TLS != (store.TLSOptions{})
}

// ClientOptions are Client as the server uses them: its pool of
// PoolConns, and REDIS_AUTH's credentials where the password is not
// given. store.NewClient validates them.
func (o *Redis) ClientOptions() store.ClientOptions {
	c := o.Client
	c.Conn.PoolSize = o.PoolConns()
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

// StoreOptions are Store as the server uses them: --redis-batches 0
// sends every request's own call (store.NoMerging), a call's send is
// bounded by --redis-read-timeout, and closing the store closes its
// client.
func (o *Redis) StoreOptions() store.RedisOptions {
	r := o.Store
	if r.Batches <= 0 {
		r.Batches = store.NoMerging
	}
	r.SendTimeout, r.CloseClient = o.Client.Conn.ReadTimeout, true
	return r
}

// validate checks what can be checked before a client is made.
func (o *Redis) validate() error {
	if o.Client.URL == "" && o.set() {
		return errors.New("--redis-* settings (REDIS_* variables) given without --redis-url (REDIS_URL): " +
			"without it FastLimit runs on its embedded store, which needs none")
	}
	return nil
}

// PoolConns is the Redis connection pool's size per server reached:
// --redis-pool-size, or 10 per CPU when it is 0.
func (o *Redis) PoolConns() int {
	if o.Client.Conn.PoolSize > 0 {
		return o.Client.Conn.PoolSize
	}
	return 10 * runtime.GOMAXPROCS(0)
}
