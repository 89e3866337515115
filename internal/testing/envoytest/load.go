package envoytest

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Count is what a Load's requests were answered: 200, 429, anything else
// (or no answer).
type Count struct{ OK, Denied, Failed int }

// Add returns c and d summed.
func (c Count) Add(d Count) Count {
	return Count{c.OK + d.OK, c.Denied + d.Denied, c.Failed + d.Failed}
}

// slot is a Load's resolution: answers are counted by the slot in which
// their request was due.
const slot = 10 * time.Millisecond

// loadWorkers bounds a Load's requests in flight (and its connections).
const loadWorkers = 16

// Load sends GET requests with its headers to an HTTP address at a set
// rate, spread evenly, and counts the answers by when each request was
// due: if the Load's own goroutines are held up (a busy machine), the
// requests it then sends late count in the period they were due in, not
// in the next one. It stops when the test ends.
type Load struct {
	start  time.Time
	url    string
	header http.Header
	client *http.Client
	jobs   chan time.Time // each request's due time
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	rate  float64
	slots []Count
}

// StartLoad starts sending requests to addr (host:port) with header at
// rate a second.
func StartLoad(t testing.TB, addr string, header map[string]string, rate float64) *Load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{
		start: time.Now(), url: "http://" + addr + "/", header: http.Header{}, rate: rate, stop: cancel,
		jobs: make(chan time.Time, 1<<14),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: loadWorkers, MaxConnsPerHost: loadWorkers, DisableCompression: true}},
	}
	for k, v := range header {
		l.header.Set(k, v)
	}
	for range loadWorkers {
		l.wg.Go(func() { l.work(ctx) })
	}
	l.wg.Go(func() { l.pace(ctx) })
	t.Cleanup(l.Stop)
	return l
}

// Start is when the Load began.
func (l *Load) Start() time.Time { return l.start }

// SetRate changes the rate, from now on.
func (l *Load) SetRate(rate float64) {
	l.mu.Lock()
	l.rate = rate
	l.mu.Unlock()
}

// Stop stops sending and waits for the requests in flight.
func (l *Load) Stop() {
	l.stop()
	l.wg.Wait()
	l.client.CloseIdleConnections()
}

// pace queues the requests owed every millisecond or so, each with the
// time it fell due (spread evenly over the time since the last tick).
func (l *Load) pace(ctx context.Context) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	last, owed := time.Now(), 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			l.mu.Lock()
			rate := l.rate
			l.mu.Unlock()
			owed += rate * now.Sub(last).Seconds()
			last = now
			for ; owed >= 1; owed-- {
				due := now.Add(-time.Duration((owed - 1) / rate * float64(time.Second)))
				select {
				case l.jobs <- due:
				default: // the workers are this far behind: count it failed
					l.count(due, func(c *Count) { c.Failed++ })
				}
			}
		}
	}
}

func (l *Load) work(ctx context.Context) {
	var due time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case due = <-l.jobs:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.url, nil)
		if err != nil {
			panic(err)
		}
		req.Header = l.header.Clone()
		resp, err := l.client.Do(req)
		code := 0
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code = resp.StatusCode
		} else if ctx.Err() != nil {
			return
		}
		l.count(due, func(c *Count) {
			switch code {
			case http.StatusOK:
				c.OK++
			case http.StatusTooManyRequests:
				c.Denied++
			default:
				c.Failed++
			}
		})
	}
}

func (l *Load) count(at time.Time, f func(*Count)) {
	i := int(at.Sub(l.start) / slot)
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.slots) <= i {
		l.slots = append(l.slots, Count{})
	}
	f(&l.slots[i])
}

// Between sums the answers to the requests due in [from, to).
func (l *Load) Between(from, to time.Time) Count {
	i, j := int(from.Sub(l.start)/slot), int(to.Sub(l.start)/slot)
	l.mu.Lock()
	defer l.mu.Unlock()
	var c Count
	for k := max(i, 0); k < j && k < len(l.slots); k++ {
		c = c.Add(l.slots[k])
	}
	return c
}
