package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// deployRules are the rules of the Redis deployment tests: day-long
// windows, so that nothing rolls over during a test.
const deployRules = `
domain: deploy
descriptors:
  - key: fixed
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: sliding
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: token_bucket}
  - key: load
    rate_limit: {unit: day, requests_per_unit: 1000000000}
`

// loadLimit is the limit of the "load" rule: high enough never to deny,
// so that each OK response tells the counter's value after its hit.
const loadLimit = 1_000_000_000

// startDeployServers starts n servers on deployRules with extra flags.
func startDeployServers(t *testing.T, n int, extra ...string) []*fastlimit {
	t.Helper()
	dir := writeRules(t, map[string]string{"deploy.yaml": deployRules})
	var servers []*fastlimit
	for range n {
		servers = append(servers, startServer(t, dir, true, extra...))
	}
	return servers
}

func deployRequest(key, value string) *rls.RateLimitRequest {
	return &rls.RateLimitRequest{Domain: "deploy", Descriptors: []*common.RateLimitDescriptor{desc(key, value)}}
}

// checkExactness: 300 concurrent callers spread over the servers admit
// exactly the limit, for each algorithm.
func checkExactness(t *testing.T, servers []*fastlimit) {
	t.Helper()
	const callers, limit = 300, 100
	for _, alg := range []string{"fixed", "sliding", "bucket"} {
		t.Run(alg, func(t *testing.T) {
			id := fmt.Sprintf("exact-%d", time.Now().UnixNano())
			var ok, over, failed atomic.Int64
			var firstErr atomic.Value
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range callers {
				wg.Go(func() {
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					resp, err := servers[i%len(servers)].Client.ShouldRateLimit(ctx, deployRequest(alg, id))
					switch {
					case err != nil:
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					case resp.OverallCode == rls.RateLimitResponse_OK:
						ok.Add(1)
					default:
						over.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			if failed.Load() != 0 || ok.Load() != limit || over.Load() != callers-limit {
				t.Fatalf("%s: %d OK, %d OVER_LIMIT, %d failed (first error %v); want exactly %d OK, %d OVER_LIMIT",
					alg, ok.Load(), over.Load(), failed.Load(), firstErr.Load(), limit, callers-limit)
			}
		})
	}
}

// TestClusterExactness: three servers sharing a Redis Cluster admit
// exactly the limit under concurrency, for each algorithm.
func TestClusterExactness(t *testing.T) {
	waitOutDayBoundary(t)
	c := redistest.StartCluster(t)
	servers := startDeployServers(t, 3, "--redis-type", "CLUSTER", "--redis-url", c.Seeds(), "--store-timeout", "5s")
	checkExactness(t, servers)
}

// failoverLoad sends "load" requests through servers from several
// workers and records what happened around a kill.
type failoverLoad struct {
	servers []*fastlimit
	id      string
	killAt  time.Time

	mu        sync.Mutex
	ok        int64
	failed    int64
	counts    []int64 // counter values the OK responses report
	firstFail time.Time
	lastFail  time.Time
	lastOK    time.Time
	errSample []string
}

// run sends requests from workers goroutines until stop closes.
func (l *failoverLoad) run(workers int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				resp, err := l.servers[i%len(l.servers)].Client.ShouldRateLimit(ctx, deployRequest("load", l.id))
				cancel()
				l.record(resp, err)
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	return &wg
}

func (l *failoverLoad) record(resp *rls.RateLimitResponse, err error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && resp.OverallCode == rls.RateLimitResponse_OK {
		l.ok++
		l.counts = append(l.counts, loadLimit-int64(resp.Statuses[0].LimitRemaining))
		l.lastOK = now
		return
	}
	l.failed++
	if !l.killAt.IsZero() {
		if l.firstFail.IsZero() {
			l.firstFail = now
		}
		l.lastFail = now
	}
	if len(l.errSample) < 3 {
		if err == nil {
			err = fmt.Errorf("answered %v", resp.GetOverallCode())
		}
		l.errSample = append(l.errSample, err.Error())
	}
}

func (l *failoverLoad) kill(kill func()) {
	l.mu.Lock()
	l.killAt = time.Now()
	l.mu.Unlock()
	kill()
}

// waitRecovered waits until requests have succeeded for quiet with no
// failure, at most d after the kill, and reports whether they did.
func (l *failoverLoad) waitRecovered(d, quiet time.Duration) bool {
	for time.Since(l.killAt) < d {
		l.mu.Lock()
		ok := l.lastOK.After(l.lastFail) && time.Since(l.lastFail) > quiet && time.Since(l.killAt) > quiet
		l.mu.Unlock()
		if ok {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// failover runs a load on each id (keyed by a label for the log), kills
// a node with kill (which returns once Redis has failed over), and checks
// that decisions flowed again within bound and that no hit was counted
// twice.
func failover(t *testing.T, what string, servers []*fastlimit, ids map[string]string, kill func(), bound time.Duration) {
	loads := map[string]*failoverLoad{}
	stop := make(chan struct{})
	var wgs []*sync.WaitGroup
	for label, id := range ids {
		loads[label] = &failoverLoad{servers: servers, id: id}
		wgs = append(wgs, loads[label].run(6/len(ids), stop))
	}
	time.Sleep(time.Second)
	killAt := time.Now()
	for _, l := range loads {
		l.mu.Lock()
		l.killAt = killAt
		l.mu.Unlock()
	}
	kill()
	t.Logf("%s: Redis failed over %v after the kill", what, time.Since(killAt).Round(time.Millisecond))
	recovered := true
	for _, l := range loads {
		recovered = recovered && l.waitRecovered(30*time.Second, time.Second)
	}
	close(stop)
	for _, wg := range wgs {
		wg.Wait()
	}
	for label, l := range loads {
		if !recovered {
			t.Errorf("%s: decisions did not flow again within 30 s of the kill (last failure %v after it; errors %q)",
				label, l.lastFail.Sub(l.killAt), l.errSample)
			continue
		}
		l.report(t, what+" "+label, len(servers), bound)
	}
}

// report reads the counter with one more hit and checks the figures.
func (l *failoverLoad) report(t *testing.T, what string, servers int, bound time.Duration) {
	ctx := ctxTimeout(t, 10*time.Second)
	resp, err := l.servers[0].Client.ShouldRateLimit(ctx, deployRequest("load", l.id))
	if err != nil {
		t.Fatal(err)
	}
	final := loadLimit - int64(resp.Statuses[0].LimitRemaining) - 1

	seen := map[int64]bool{}
	lo, hi := int64(1)<<62, int64(0)
	for _, c := range l.counts {
		seen[c] = true
		lo, hi = min(lo, c), max(hi, c)
	}
	// A value two OK answers share is a hit the old master acknowledged
	// and lost (replication is asynchronous); a value no answer shows is a
	// hit that ran without an OK answer.
	lost := int64(len(l.counts) - len(seen))
	gaps := hi - lo + 1 - int64(len(seen))
	var first, outage time.Duration
	if !l.firstFail.IsZero() {
		first, outage = l.firstFail.Sub(l.killAt), l.lastFail.Sub(l.killAt)
	}
	t.Logf("%s, through %d servers: decisions failed from %v to %v after the kill; %d requests failed, %d OK; "+
		"counter %d; %d acknowledged hits lost with the old master; %d hits ran without an OK answer; errors %q",
		what, servers, first.Round(time.Millisecond), outage.Round(time.Millisecond),
		l.failed, l.ok, final, lost, gaps, l.errSample)
	if outage > bound {
		t.Errorf("%s: decisions failed for %v after the kill, want under %v", what, outage, bound)
	}
	// A hit runs at most once: those that ran are the OK ones and some of
	// the failed ones.
	if gaps > l.failed || final+lost > l.ok+l.failed {
		t.Errorf("%s: counter %d (%d lost, %d unanswered) exceeds %d OK + %d failed: some hit counted twice",
			what, final, lost, gaps, l.ok, l.failed)
	}
}

// TestClusterFailover kills the master of a key under load through three
// servers: decisions fail until a replica takes over, then flow again. A
// key on another master is watched too.
func TestClusterFailover(t *testing.T) {
	waitOutDayBoundary(t)
	c := redistest.StartCluster(t)
	servers := startDeployServers(t, 3, "--redis-type", "cluster", "--redis-url", c.Seeds(), "--store-timeout", "200ms")
	tag := func(id string) string { return "{deploy/load=" + id + "}" }
	id := fmt.Sprintf("failover-%d", time.Now().UnixNano())
	old := c.MasterOf(t, tag(id))
	other := ""
	for i := 0; other == ""; i++ {
		if cand := fmt.Sprintf("%s-other-%d", id, i); c.MasterOf(t, tag(cand)) != old {
			other = cand
		}
	}
	failover(t, "cluster", servers, map[string]string{"key on the killed master": id, "key on another master": other}, func() {
		c.Kill(t, old)
		c.WaitFailover(t, tag(id), old)
	}, 15*time.Second)
}
