package faultproxy

import (
	"fmt"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Load is what a run of callers saw through faults (RunLoad). Caller c
// counts on a counter of its own that starts at c x span, so that an
// answer carrying another caller's count is caught.
type Load struct {
	OK, Failed atomic.Int64
	// Wrong counts the answers not allowed, or whose count did not grow
	// or left the caller's span.
	Wrong      atomic.Int64
	firstWrong atomic.Value // string
	mu         sync.Mutex
	errs       map[string]int // failures by kind
}

// RunLoad runs callers concurrently, each calling call(c) back to back
// (or one every pace), while during runs and for d after it returns (for
// d without during). during gets the Load, so that it can wait on its
// counts: a fault comes once the load runs, and lasts some number of
// calls. call returns the count caller c's counter showed and whether the
// answer allowed the call, or an error, which kind names for Errors.
func RunLoad(callers int, d, pace time.Duration, span int64, call func(c int) (count int64, allowed bool, err error),
	kind func(error) string, during func(*Load)) *Load {
	l := &Load{errs: map[string]int{}}
	var end atomic.Int64 // Unix ns
	end.Store(math.MaxInt64)
	if during == nil {
		end.Store(time.Now().Add(d).UnixNano())
	}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			last := int64(c) * span
			for next := time.Now(); time.Now().UnixNano() < end.Load(); next = next.Add(pace) {
				if pace > 0 {
					time.Sleep(time.Until(next))
				}
				count, allowed, err := call(c)
				if err != nil {
					l.Failed.Add(1)
					l.mu.Lock()
					l.errs[kind(err)]++
					l.mu.Unlock()
					continue
				}
				if !allowed || count <= last || count >= int64(c+1)*span {
					l.Wrong.Add(1)
					l.firstWrong.CompareAndSwap(nil, fmt.Sprintf("caller %d: count %d after %d", c, count, last))
				} else {
					last = count
				}
				l.OK.Add(1)
			}
		})
	}
	if during != nil {
		func() {
			defer func() { end.Store(time.Now().Add(d).UnixNano()) }() // even if during fails its test
			during(l)
		}()
	}
	wg.Wait()
	return l
}

// FirstWrong describes the first wrong answer, "" without one.
func (l *Load) FirstWrong() string {
	s, _ := l.firstWrong.Load().(string)
	return s
}

// Errors returns the failures by kind.
func (l *Load) Errors() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.errs)
}

func (l *Load) String() string {
	return fmt.Sprintf("%d ok, %d failed, %d wrong; errors %v", l.OK.Load(), l.Failed.Load(), l.Wrong.Load(), l.Errors())
}
