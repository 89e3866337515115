package benchproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// Ports hands out free loopback ports, each at most once per run: a port
// nobody listens on when asked. Another program may still take it before
// the child binds it; the child then fails to start with a clear error.
type Ports struct {
	mu   sync.Mutex
	used map[int]bool
}

// Free returns a loopback port not handed out before.
func (pp *Ports) Free() (int, error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.used == nil {
		pp.used = map[int]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free loopback port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !pp.used[port] {
			pp.used[port] = true
			return port, nil
		}
	}
	return 0, errors.New("find a free loopback port: every port offered was handed out already")
}

// WaitUntil polls cond every 50 ms until it returns nil, d passes or ctx
// is done, and returns cond's last error then.
func WaitUntil(ctx context.Context, d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ChildEnv is the environment of every server: PATH, HOME and the Go
// runtime's tuning variables if set, nothing else. FastLimit reads a
// variable for every flag and the reference reads REDIS_URL and friends,
// so the caller's own settings must not leak into either.
func ChildEnv(extra ...string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "GOMAXPROCS", "GOGC", "GOMEMLIMIT", "GODEBUG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}
