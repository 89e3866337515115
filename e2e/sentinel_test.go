package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// TestSentinelExactness: three servers sharing a Sentinel-managed master
// admit exactly the limit under concurrency, for each algorithm.
func TestSentinelExactness(t *testing.T) {
	waitOutDayBoundary(t)
	s := redistest.StartSentinel(t)
	servers := startDeployServers(t, 3, "--redis-type", "SENTINEL", "--redis-url", s.URL(), "--store-timeout", "5s")
	checkExactness(t, servers)
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
