package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// load is one load the setups take turns under: an open loop at rate
// requests/s, or a closed loop of conns connections.
type load struct {
	rate  int // open loop when above 0
	conns int // closed loop when above 0
}

func (l load) String() string {
	if l.rate > 0 {
		return fmt.Sprintf("open loop %d/s", l.rate)
	}
	return fmt.Sprintf("closed loop, %d connections", l.conns)
}

// openWorkers bounds the requests of an open loop in flight: a request
// due while all are busy waits, and its wait counts in its latency.
const openWorkers = 256

// sample is what one run of a load got.
type sample struct {
	ok, failed int
	elapsed    time.Duration
	latencies  []time.Duration // of the ok requests
}

// client sends the bench's requests to one Envoy listener.
type client struct {
	url   string
	users []string // x-user values, sent in turn
	c     *http.Client
	next  int
	mu    sync.Mutex
}

func newClient(listen string, users int) *client {
	u := make([]string, users)
	for i := range u {
		u[i] = "u" + strconv.Itoa(i)
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: openWorkers,
		IdleConnTimeout:     time.Minute,
	}
	return &client{url: "http://" + listen + "/", users: u, c: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

func (c *client) user() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next = (c.next + 1) % len(c.users)
	return c.users[c.next]
}

// do sends one request and reads the answer whole: true for a 200.
func (c *client) do(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return false
	}
	req.Header.Set("x-user", c.user())
	resp, err := c.c.Do(req)
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return err == nil && resp.StatusCode == http.StatusOK
}

// run sends l for d and returns what it got.
func (c *client) run(ctx context.Context, l load, d time.Duration) sample {
	if l.rate > 0 {
		return c.open(ctx, l.rate, d)
	}
	return c.closed(ctx, l.conns, d)
}

// recorder collects the results of concurrent requests.
type recorder struct {
	mu sync.Mutex
	s  sample
}

func (r *recorder) add(ok bool, lat time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.s.ok++
		r.s.latencies = append(r.s.latencies, lat)
	} else {
		r.s.failed++
	}
}

// open sends rate requests a second for d, each at its own time whatever
// the answers to the others; a request's latency runs from that time, so
// that a slow answer that delays the next sends counts in theirs.
func (c *client) open(ctx context.Context, rate int, d time.Duration) sample {
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	due := make(chan time.Time, openWorkers)
	var rec recorder
	var wg sync.WaitGroup
	for range openWorkers {
		wg.Go(func() {
			for t := range due {
				ok := c.do(ctx)
				rec.add(ok, time.Since(t))
			}
		})
	}
	start := time.Now()
	for i := range n {
		t := start.Add(time.Duration(i) * interval)
		if wait := time.Until(t); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		due <- t
	}
	close(due)
	wg.Wait()
	rec.s.elapsed = time.Since(start)
	return rec.s
}

// closed runs conns connections for d, each sending its next request when
// the last is answered.
func (c *client) closed(ctx context.Context, conns int, d time.Duration) sample {
	var rec recorder
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for range conns {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				t := time.Now()
				ok := c.do(ctx)
				rec.add(ok, time.Since(t))
			}
		})
	}
	wg.Wait()
	rec.s.elapsed = time.Since(start)
	return rec.s
}

// startUpstream serves 200 "ok" on a free loopback port until ctx ends:
// the trivial upstream every Envoy routes to.
func startUpstream(ctx context.Context) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(err)
		}
	}()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	return l.Addr().String(), nil
}
