package benchproc

import (
	"errors"
	"os"
	"strings"
	"sync"

	"github.com/fastlimit/fastlimit/internal/testing/loopback"
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
		port, err := loopback.FreePort()
		if err != nil {
			return 0, err
		}
		if !pp.used[port] {
			pp.used[port] = true
			return port, nil
		}
	}
	return 0, errors.New("find a free loopback port: every port offered was handed out already")
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

// LoadAverages returns the machine's 1, 5 and 15 minute load averages, or "" off Linux.
func LoadAverages() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
