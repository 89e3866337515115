package connlimit

import (
	"errors"
	"fmt"
)

// DefaultReserve is what a Budget leaves by default for the descriptors
// that are neither capped connections, nor Redis connections, nor HTTP
// connections: standard streams, the runtime's poller, the rules
// watcher, the listeners themselves, a rules or certificate file being
// read, statsd, OTLP and xDS connections, with room to spare.
const DefaultReserve = 64

// MinCap is the smallest cap Budget.Cap returns without an error.
const MinCap = 16

// ErrTooFewFiles is returned by Budget.Cap when the open-files limit
// leaves less than MinCap connections.
var ErrTooFewFiles = errors.New("open-files limit too low")

// Budget splits the process's open-files limit (RLIMIT_NOFILE) between
// a capped listener's connections and everything else the process keeps
// open, so that the listener at its cap leaves descriptors for the rest:
//
//	Cap = Files - Redis - HTTP - Reserve, at most Max
//
// Go raises the soft open-files limit to the hard limit when a program
// starts (Linux, Go 1.19 and later), so Files is usually the hard limit.
type Budget struct {
	// Files is the open-files limit; 0 reads it from the process
	// (OpenFilesLimit).
	Files int
	// Redis is the most connections the store opens to Redis: the pool
	// size times the servers reached (Cluster nodes, sentinels).
	Redis int
	// HTTP is the most connections the HTTP listeners (health, admin,
	// Prometheus) hold together: the sum of their caps.
	HTTP int
	// Reserve is the rest; 0 means DefaultReserve.
	Reserve int
	// Max, when > 0, bounds the cap whatever the limit: with a limit of a
	// million files, memory runs out long before descriptors do.
	Max int
}

// Cap returns the connections the capped listener may hold. It fails
// with ErrTooFewFiles, naming the figures, when that is less than
// MinCap, and with the error of OpenFilesLimit when Files is 0 and the
// limit cannot be read.
func (b Budget) Cap() (int, error) {
	if b.Files == 0 {
		n, err := OpenFilesLimit()
		if err != nil {
			return 0, err
		}
		b.Files = n
	}
	if b.Reserve == 0 {
		b.Reserve = DefaultReserve
	}
	n := b.Files - b.Redis - b.HTTP - b.Reserve
	if n < MinCap {
		return 0, fmt.Errorf("%w: %d open files, less %d for Redis, %d for HTTP and %d reserved, leave %d connections, want at least %d",
			ErrTooFewFiles, b.Files, b.Redis, b.HTTP, b.Reserve, n, MinCap)
	}
	if b.Max > 0 {
		n = min(n, b.Max)
	}
	return n, nil
}
