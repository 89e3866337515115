package refstats

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// TestRuntimePoolCacheSeries: under USE_PROMETHEUS the reference's Go
// runtime, Redis pool and local cache stats come out as it exports them
// through its built-in mapping: ratelimit_go_* gauges and counters,
// ratelimit_redis_pool_cx_active (gauge), cx_total and cx_local_close
// (counters), ratelimit_localcache_* gauges.
func TestRuntimePoolCacheSeries(t *testing.T) {
	h := newRefHarness(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", 0.8, nil)
	pool := PoolStats{Active: 3, Total: 5, Closed: 2}
	h.stats.AddRedisPool(func() PoolStats { return pool })
	h.stats.AddLocalCache(func() CacheStats { return CacheStats{Entries: 7, Hits: 11} })
	// A counter appears once it has counted, as the reference's: one GC
	// makes numGC and pauseTotalNs count.
	runtime.GC()
	got := gatherTyped(t, h.reg)
	for name, typ := range map[string]dto.MetricType{
		"ratelimit_go_alloc": dto.MetricType_GAUGE, "ratelimit_go_sys": dto.MetricType_GAUGE,
		"ratelimit_go_heapAlloc": dto.MetricType_GAUGE, "ratelimit_go_heapSys": dto.MetricType_GAUGE,
		"ratelimit_go_heapIdle": dto.MetricType_GAUGE, "ratelimit_go_heapInuse": dto.MetricType_GAUGE,
		"ratelimit_go_heapReleased": dto.MetricType_GAUGE, "ratelimit_go_heapObjects": dto.MetricType_GAUGE,
		"ratelimit_go_nextGC": dto.MetricType_GAUGE, "ratelimit_go_lastGC": dto.MetricType_GAUGE,
		"ratelimit_go_gcCPUPercent": dto.MetricType_GAUGE, "ratelimit_go_numGoroutine": dto.MetricType_GAUGE,
		"ratelimit_go_totalAlloc": dto.MetricType_COUNTER, "ratelimit_go_mallocs": dto.MetricType_COUNTER,
		"ratelimit_go_frees": dto.MetricType_COUNTER, "ratelimit_go_pauseTotalNs": dto.MetricType_COUNTER,
		"ratelimit_go_numGC":             dto.MetricType_COUNTER,
		"ratelimit_redis_pool_cx_active": dto.MetricType_GAUGE, "ratelimit_redis_pool_cx_total": dto.MetricType_COUNTER,
		"ratelimit_redis_pool_cx_local_close": dto.MetricType_COUNTER,
		"ratelimit_localcache_entryCount":     dto.MetricType_GAUGE, "ratelimit_localcache_hitCount": dto.MetricType_GAUGE,
	} {
		s, ok := got[name]
		if !ok {
			t.Errorf("no %s", name)
			continue
		}
		if s.typ != typ {
			t.Errorf("%s is a %v, want %v", name, s.typ, typ)
		}
	}
	for name, want := range map[string]float64{
		"ratelimit_redis_pool_cx_active": 3, "ratelimit_redis_pool_cx_total": 5, "ratelimit_redis_pool_cx_local_close": 2,
		"ratelimit_localcache_entryCount": 7, "ratelimit_localcache_hitCount": 11,
	} {
		if got[name].v != want {
			t.Errorf("%s = %v, want %v", name, got[name].v, want)
		}
	}
	if got["ratelimit_go_alloc"].v <= 0 || got["ratelimit_go_numGoroutine"].v < 1 || got["ratelimit_go_totalAlloc"].v < got["ratelimit_go_alloc"].v {
		t.Errorf("runtime values: alloc %v goroutines %v totalAlloc %v", got["ratelimit_go_alloc"].v, got["ratelimit_go_numGoroutine"].v, got["ratelimit_go_totalAlloc"].v)
	}
	// Gauges follow the pool; its counters never go back.
	pool = PoolStats{Active: 1, Total: 4, Closed: 3}
	got = gatherTyped(t, h.reg)
	if got["ratelimit_redis_pool_cx_active"].v != 1 || got["ratelimit_redis_pool_cx_total"].v != 5 || got["ratelimit_redis_pool_cx_local_close"].v != 3 {
		t.Errorf("pool series after a change: %v %v %v", got["ratelimit_redis_pool_cx_active"].v,
			got["ratelimit_redis_pool_cx_total"].v, got["ratelimit_redis_pool_cx_local_close"].v)
	}
}

type typedValue struct {
	typ dto.MetricType
	v   float64
}

func gatherTyped(t *testing.T, g prometheus.Gatherer) map[string]typedValue {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]typedValue{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		v := m.GetGauge().GetValue()
		if mf.GetType() == dto.MetricType_COUNTER {
			v = m.GetCounter().GetValue()
		}
		out[mf.GetName()] = typedValue{mf.GetType(), v}
	}
	return out
}

// TestStatsdResponseTimer: with USE_STATSD the reference's response timer
// goes to statsd, one "ratelimit_server.<Method>.response_time:<ms>|ms"
// line per call, beside total_requests and the runtime's gauges.
func TestStatsdResponseTimer(t *testing.T) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	addr := conn.LocalAddr().(*net.UDPAddr)
	st := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { _ = st.Close() })
	m, err := New(Options{UseStatsd: true, StatsdHost: "127.0.0.1", StatsdPort: addr.Port, StatsdProtocol: "udp",
		FlushInterval: time.Hour}, limiter.New(st, limiter.Options{}), prometheus.NewRegistry(), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.New(time.Now())
	m.stats.now = clk.Now
	info := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	for range 3 {
		_, _ = m.stats.interceptor(context.Background(), nil, info, func(context.Context, any) (any, error) {
			clk.Advance(2 * time.Millisecond)
			return nil, nil
		})
	}
	if err := m.client.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lines []string
	buf := make([]byte, 65536)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for !hasAll(lines, "ratelimit_server.ShouldRateLimit.response_time:", 3) || !hasAll(lines, "ratelimit.go.numGoroutine:", 1) {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("lines %q: %v", lines, err)
		}
		lines = append(lines, strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n")...)
	}
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, "ratelimit_server.ShouldRateLimit.response_time:"); ok {
			if v != "2|ms" {
				t.Errorf("timer line %q, want the 2 ms each call took on the clock", l)
			}
		}
	}
	if !hasAll(lines, "ratelimit_server.ShouldRateLimit.total_requests:3|c", 1) {
		t.Errorf("lines %q lack total_requests 3", lines)
	}
}

func hasAll(lines []string, prefix string, n int) bool {
	c := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			c++
		}
	}
	return c >= n
}
