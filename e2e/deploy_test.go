package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// startDeployServers starts n servers on deployRules with extra flags.
func startDeployServers(t *testing.T, n int, extra ...string) []*fastlimit {
	t.Helper()
	dir := files.Dir(t, map[string]string{"deploy.yaml": deployRules})
	var servers []*fastlimit
	for range n {
		servers = append(servers, startServer(t, dir, true, extra...))
	}
	return servers
}

// TestClusterExactness: three servers sharing a Redis Cluster admit
// exactly the limit under concurrency, for each algorithm.
func TestClusterExactness(t *testing.T) {
	waitOutDayBoundary(t)
	c := redistest.StartCluster(t)
	servers := startDeployServers(t, 3, "--redis-type", "CLUSTER", "--redis-url", c.Seeds(), "--store-timeout", "5s")
	checkExactness(t, servers, 300, "deploy")
}

// failoverLoad sends "load" requests through servers from several
// workers and records what happened around a kill.
type failoverLoad struct {
	servers []*fastlimit
	id      string
	redistest.Outage
}

// run sends requests from workers goroutines until the returned stop is
// called.
func (l *failoverLoad) run(workers int) (stop func()) {
	return loop(workers, 5*time.Millisecond, func(w, n int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := l.servers[(w+n)%len(l.servers)].Client.ShouldRateLimit(ctx, domainRequest("deploy", l.id, "load"))
		l.record(resp, err)
	})
}

func (l *failoverLoad) record(resp *rls.RateLimitResponse, err error) {
	if err == nil && resp.OverallCode != rls.RateLimitResponse_OK {
		err = fmt.Errorf("answered %v", resp.GetOverallCode())
	}
	var count int64
	if err == nil {
		count = loadLimit - int64(resp.Statuses[0].LimitRemaining)
	}
	l.Record(count, err)
}

// failover runs a load on each id (keyed by a label for the log), kills
// a node with kill (which returns once Redis has failed over), and checks
// that decisions flowed again within bound and that no hit was counted
// twice.
func failover(t *testing.T, what string, servers []*fastlimit, ids map[string]string, kill func(), bound time.Duration) {
	loads := map[string]*failoverLoad{}
	var stops []func()
	for label, id := range ids {
		loads[label] = &failoverLoad{servers: servers, id: id}
		stops = append(stops, loads[label].run(6/len(ids)))
	}
	for _, l := range loads { // the loads run: 50 decisions each before the kill
		wait.For(t, 30*time.Second, func() bool { return l.Figures().OK >= 50 })
	}
	killAt := time.Now()
	for _, l := range loads {
		l.Kill(killAt)
	}
	kill()
	t.Logf("%s: Redis failed over %v after the kill", what, time.Since(killAt).Round(time.Millisecond))
	recovered := true
	for _, l := range loads {
		recovered = recovered && l.WaitRecovered(30*time.Second, time.Second)
	}
	for _, stop := range stops {
		stop()
	}
	for label, l := range loads {
		if !recovered {
			f := l.Figures()
			t.Errorf("%s: decisions did not flow again within 30 s of the kill (last failure %v after it; errors %q)",
				label, f.LastFail, f.Errors)
			continue
		}
		l.report(t, what+" "+label, len(servers), bound)
	}
}

// report reads the counter with one more hit and checks the figures.
func (l *failoverLoad) report(t *testing.T, what string, servers int, bound time.Duration) {
	ctx := ctxTimeout(t, 10*time.Second)
	resp, err := l.servers[0].Client.ShouldRateLimit(ctx, domainRequest("deploy", l.id, "load"))
	if err != nil {
		t.Fatal(err)
	}
	final := loadLimit - int64(resp.Statuses[0].LimitRemaining) - 1
	f := l.Figures()
	t.Logf("%s, through %d servers: decisions failed from %v to %v after the kill; %d requests failed, %d OK; "+
		"counter %d; %d acknowledged hits lost with the old master; %d hits ran without an OK answer; errors %q",
		what, servers, f.FirstFail.Round(time.Millisecond), f.LastFail.Round(time.Millisecond),
		f.Failed, f.OK, final, f.Lost, f.Gaps, f.Errors)
	if f.LastFail > bound {
		t.Errorf("%s: decisions failed for %v after the kill, want under %v", what, f.LastFail, bound)
	}
	// A hit runs at most once: those that ran are the OK ones and some of
	// the failed ones.
	if f.Gaps > f.Failed || final+f.Lost > f.OK+f.Failed {
		t.Errorf("%s: counter %d (%d lost, %d unanswered) exceeds %d OK + %d failed: some hit counted twice",
			what, final, f.Lost, f.Gaps, f.OK, f.Failed)
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

// TestSentinelExactness: three servers sharing a Sentinel-managed master
// admit exactly the limit under concurrency, for each algorithm.
func TestSentinelExactness(t *testing.T) {
	waitOutDayBoundary(t)
	s := redistest.StartSentinel(t)
	servers := startDeployServers(t, 3, "--redis-type", "SENTINEL", "--redis-url", s.URL(), "--store-timeout", "5s")
	checkExactness(t, servers, 300, "deploy")
}

// TestSentinelFailover kills the master under load through three servers:
// decisions fail until the sentinels promote a replica and the servers
// follow, then flow again.
func TestSentinelFailover(t *testing.T) {
	waitOutDayBoundary(t)
	s := redistest.StartSentinel(t)
	servers := startDeployServers(t, 3, "--redis-type", "sentinel", "--redis-url", s.URL(), "--store-timeout", "200ms")
	id := fmt.Sprintf("failover-%d", time.Now().UnixNano())
	old := s.Master(t)
	failover(t, "sentinel", servers, map[string]string{"key": id}, func() {
		s.Kill(t, old)
		s.WaitFailover(t, old)
	}, 15*time.Second)
}
