package connlimit

import (
	"errors"
	"fmt"
)

// DefaultReserve is Budget.Reserve's default (docs/design.md#connection-caps).
const DefaultReserve = 64

// MinCap is the smallest cap Budget.Cap returns without an error.
const MinCap = 16

// ErrTooFewFiles: the open-files limit leaves less than MinCap connections.
var ErrTooFewFiles = errors.New("open-files limit too low")

// Budget splits the open-files limit between a capped listener and the
// rest: Cap = Files - Redis - HTTP - Reserve, at most Max.
type Budget struct {
	Files   int // the open-files limit; 0 reads it (OpenFilesLimit)
	Redis   int // the store's connections: pool size x servers reached
	HTTP    int // the HTTP listeners' caps, summed
	Reserve int // the rest; 0 means DefaultReserve
	Max     int // when > 0, bounds the cap
}

// Cap returns the capped listener's connections, or ErrTooFewFiles below MinCap.
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
