package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// Outage test settings.
const (
	outageStoreTimeout = 100 * time.Millisecond
	// outageSlack is what an answer may take beyond the store timeout:
	// the gRPC round trip and scheduling on a shared machine (the
	// breaker probes in the background: no answer waits for it). The
	// 99th percentile of every phase must keep within it; single answers
	// may take up to outageStall more (a GC pause or a preempted client
	// beside a busy CPU), far below what waiting for Redis would take
	// (the client's 5 s deadline, Redis' dial and read timeouts).
	outageSlack    = 150 * time.Millisecond
	outageStall    = time.Second
	outageDuration = 10 * time.Second
	outageWorkers  = 8
	outagePool     = 16
	// outageRecovery bounds the time from Redis answering again to the
	// last policy answer.
	outageRecovery = 5 * time.Second
)

// answer is one call of the load.
type answer struct {
	at, took time.Duration // since the load started
	kind     string        // "real", "policy" or what went wrong
}

// outageLoad sends one request per worker in a loop, 2 ms apart, and
// records every answer.
type outageLoad struct {
	start   time.Time
	mu      sync.Mutex
	answers []answer
	stop    func()
}

func startOutageLoad(srv *fastlimit, req *rls.RateLimitRequest, classify func(*rls.RateLimitResponse, error) string) *outageLoad {
	l := &outageLoad{start: time.Now()}
	l.stop = loop(outageWorkers, 2*time.Millisecond, func(int, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		begin := time.Now()
		resp, err := srv.Client.ShouldRateLimit(ctx, req)
		took := time.Since(begin)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.answers = append(l.answers, answer{at: begin.Sub(l.start), took: took, kind: classify(resp, err)})
	})
	return l
}

func (l *outageLoad) Stop() []answer {
	l.stop()
	return l.answers
}

func (l *outageLoad) since() time.Duration { return time.Since(l.start) }

// through waits until the load has answered a call it sent at or after
// at (since it started): the load ran until then. It fails t after 60 s.
func (l *outageLoad) through(t *testing.T, at time.Duration) {
	t.Helper()
	wait.For(t, at-l.since()+60*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.answers) > 0 && l.answers[len(l.answers)-1].at >= at
	})
}

// serverRedisConns counts pid's established TCP connections to port, by
// matching its socket inodes in /proc/net/tcp.
func serverRedisConns(t *testing.T, pid, port int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "01" || !inodes[fields[9]] {
				continue
			}
			_, rport, _ := strings.Cut(fields[2], ":")
			if p, err := strconv.ParseInt(rport, 16, 32); err == nil && int(p) == port {
				n++
			}
		}
		f.Close()
	}
	return n
}

// redisClients reads connected_clients from INFO, less the asking one.
func redisClients(t *testing.T, addr string) int {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, _ := strconv.Atoi(v)
			return n - 1
		}
	}
	t.Fatal("no connected_clients in INFO")
	return 0
}

type latencies []time.Duration

func (ls latencies) pct(p float64) time.Duration {
	if len(ls) == 0 {
		return 0
	}
	s := slices.Clone(ls)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func (ls latencies) String() string {
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(ls), ls.pct(0.5).Round(10*time.Microsecond),
		ls.pct(0.99).Round(10*time.Microsecond), ls.pct(1).Round(10*time.Microsecond))
}

// TestOutage kills Redis under continuous load for 10 s and starts it
// again, once per --on-store-error policy, and once more freezing Redis
// (SIGSTOP) instead of killing it: every answer comes within the store
// timeout plus a small slack and follows the policy while Redis is away,
// decisions come back by themselves once it returns, and the server's
// goroutines and Redis connections return to their baseline.
func TestOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four 10-second outages")
	}
	for _, tc := range []struct {
		policy string
		freeze bool
	}{{"allow", false}, {"deny", false}, {"error", false}, {"error", true}} {
		name := tc.policy
		if tc.freeze {
			name += "/frozen"
		}
		t.Run(name, func(t *testing.T) { testOutage(t, tc.policy, tc.freeze) })
	}
}

func testOutage(t *testing.T, policy string, freeze bool) {
	r := redistest.StartServer(t)
	admin := loopback.Addr(t)
	srv := startServer(t, files.Dir(t, map[string]string{"outage.yaml": outageRules}), true,
		"--redis-url", "redis://"+r.Addr+"/0", "--store-timeout", outageStoreTimeout.String(),
		"--on-store-error", policy, "--redis-pool-size", fmt.Sprint(outagePool), "--admin-addr", admin)
	pid := srv.cmd.Process.Pid
	name := policyName(policy, freeze)

	// With allow, a real answer is OVER_LIMIT (the limit of one is used
	// up) and the policy's is OK; with deny and error a real answer is OK.
	req := domainRequest("outage", fmt.Sprint(time.Now().UnixNano()), "high")
	classify := func(resp *rls.RateLimitResponse, err error) string {
		switch {
		case err != nil && status.Code(err) == codes.Unavailable && policy == policyError:
			return "policy"
		case err != nil:
			return "error " + status.Code(err).String()
		case resp.OverallCode == rls.RateLimitResponse_OK && policy != policyAllow,
			resp.OverallCode == rls.RateLimitResponse_OVER_LIMIT && policy == policyAllow:
			return "real"
		default:
			return "policy"
		}
	}
	if policy == policyAllow {
		req = domainRequest("outage", "x", "one")
	}
	// The first call uses up the limit of one, connects the client and
	// fills the pool with a connection: the idle baseline.
	if _, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), req); err != nil {
		t.Fatal(err)
	}
	// Concurrent calls start the store's send workers (up to
	// --redis-batches, started on demand and kept), so that the baseline
	// holds them as the count after the outage does.
	var warm sync.WaitGroup
	for range 16 {
		warm.Go(func() { _, _ = srv.Client.ShouldRateLimit(ctxTimeout(t, 5*time.Second), req) })
	}
	warm.Wait()

	idleGoroutines := goroutines(t, admin)
	load := startOutageLoad(srv, req, classify)
	load.through(t, 2*time.Second)
	loadedGoroutines := goroutineFloor(t, admin)
	baseConns, baseClients := serverRedisConns(t, pid, r.Port), redisClients(t, r.Addr)

	downAt := load.since()
	if freeze {
		if err := r.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	} else {
		r.Stop()
	}
	load.through(t, downAt+outageDuration) // Redis stays away while the load runs for outageDuration
	upAt := load.since()
	if freeze {
		if err := r.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	} else {
		r.Restart(t)
	}
	readyAt := load.since() // Redis answers PING
	load.through(t, readyAt+outageRecovery+time.Second)
	afterConns, afterClients := serverRedisConns(t, pid, r.Port), redisClients(t, r.Addr)
	afterLoaded := goroutineFloor(t, admin)
	answers := load.Stop()
	endAt := answers[len(answers)-1].at

	var idleAfter float64
	wait.True(5*time.Second, func() bool {
		idleAfter = goroutines(t, admin)
		return idleAfter <= idleGoroutines
	})

	// Sort the answers into phases; every one must be fast and either a
	// real decision or the policy's.
	var before, during, after latencies
	var slowest []answer
	var recoveredAt time.Duration = -1
	realBefore, realDuring, realLast, policyLast, policyAfter, problems := 0, 0, 0, 0, 0, 0
	for _, a := range answers {
		end := a.at + a.took
		switch {
		case a.at < downAt:
			before = append(before, a.took)
		case a.at < readyAt:
			during = append(during, a.took)
		default:
			after = append(after, a.took)
		}
		if a.took > outageStoreTimeout+outageSlack+outageStall {
			slowest = append(slowest, a)
		}
		switch a.kind {
		case "real":
			switch {
			case end < downAt:
				realBefore++
			case a.at > downAt+outageStoreTimeout && end < upAt:
				realDuring++
			case a.at >= readyAt && recoveredAt < 0:
				recoveredAt = a.at
			}
			if a.at > endAt-3*time.Second {
				realLast++
			}
		case "policy":
			if a.at > endAt-3*time.Second {
				policyLast++
			}
			if recoveredAt >= 0 {
				policyAfter++
			}
		default:
			if problems++; problems <= 5 {
				t.Errorf("answer at %v: %s", a.at.Round(time.Millisecond), a.kind)
			}
		}
	}
	recovery := recoveredAt - readyAt

	t.Logf("%s: %d answers; before %s; outage %s; after %s", name, len(answers), before, during, after)
	t.Logf("%s: Redis away %v, answering PING %v later; first real decision %v after that; %d policy answers after it",
		name, (upAt - downAt).Round(time.Millisecond), (readyAt - upAt).Round(time.Millisecond), recovery.Round(time.Millisecond), policyAfter)
	t.Logf("%s: goroutines idle %v -> %v, under load %v -> %v; server conns to Redis %d -> %d (pool %d); Redis connected_clients %d -> %d",
		name, idleGoroutines, idleAfter, loadedGoroutines, afterLoaded, baseConns, afterConns, outagePool, baseClients, afterClients)
	t.Logf("%s: timeline (real/policy per 500ms; Redis away at %v, back at %v): %s", name,
		downAt.Round(time.Millisecond), upAt.Round(time.Millisecond), timeline(answers, 500*time.Millisecond))

	for _, phase := range []struct {
		name string
		ls   latencies
	}{{"before", before}, {"outage", during}, {"after", after}} {
		if p99 := phase.ls.pct(0.99); p99 > outageStoreTimeout+outageSlack {
			t.Errorf("%s: p99 %v, more than store timeout %v + %v", phase.name, p99, outageStoreTimeout, outageSlack)
		}
	}
	for i, a := range slowest {
		if i == 5 {
			t.Errorf("... %d answers slower than %v in all", len(slowest), outageStoreTimeout+outageSlack+outageStall)
			break
		}
		t.Errorf("answer at %v took %v (%s), more than store timeout %v + %v + %v", a.at.Round(time.Millisecond),
			a.took.Round(time.Millisecond), a.kind, outageStoreTimeout, outageSlack, outageStall)
	}
	// Store timeouts on a busy machine give policy answers with Redis up:
	// tolerated, but few.
	if realBefore < len(before)*9/10 {
		t.Errorf("only %d of %d answers before the outage were real decisions", realBefore, len(before))
	}
	if realDuring > 0 {
		t.Errorf("%d real decisions while Redis was away", realDuring)
	}
	if len(during) == 0 || len(during)-realDuring == 0 {
		t.Error("no policy answer: the outage was not seen")
	}
	if recoveredAt < 0 || recovery > outageRecovery {
		t.Errorf("first real decision %v after Redis came back, want at most %v", recovery, outageRecovery)
	}
	if realLast < (realLast+policyLast)*9/10 {
		t.Errorf("in the last 3 s, %d real decisions and %d policy answers: not recovered", realLast, policyLast)
	}

	if idleAfter > idleGoroutines+1 {
		t.Errorf("goroutines: %v idle before, %v after", idleGoroutines, idleAfter)
	}
	if afterLoaded > loadedGoroutines+outageWorkers {
		t.Errorf("goroutines under load: %v before, %v after", loadedGoroutines, afterLoaded)
	}
	if afterConns > outagePool || afterClients > outagePool {
		t.Errorf("connections to Redis after the outage: %d from the server, %d at Redis; pool is %d", afterConns, afterClients, outagePool)
	}
	if t.Failed() || os.Getenv("OUTAGE_LOGS") != "" {
		for _, line := range strings.Split(srv.logs.String(), "\n") {
			if strings.Contains(line, "breaker") {
				t.Log(line)
			}
		}
	}
}

// goroutines reads go_goroutines from the admin listener, on a connection
// of its own that does not outlive the scrape (an idle keep-alive
// connection holds a server goroutine).
func goroutines(t *testing.T, admin string) float64 {
	t.Helper()
	return scrape.Value(t, metricsPage(t, admin), "go_goroutines")
}

// goroutineFloor is the fewest goroutines of 5 scrapes 100 ms apart under
// load: calls in flight come and go between scrapes (one scrape may catch
// all 8 workers' calls, another none), while a leak raises every scrape.
func goroutineFloor(t *testing.T, admin string) float64 {
	t.Helper()
	pace := time.NewTicker(100 * time.Millisecond)
	defer pace.Stop()
	least := goroutines(t, admin)
	for range 4 {
		<-pace.C
		least = min(least, goroutines(t, admin))
	}
	return least
}

func policyName(policy string, freeze bool) string {
	if freeze {
		return policy + " (Redis frozen)"
	}
	return policy + " (Redis killed)"
}

// Policies of --on-store-error.
const (
	policyAllow = "allow"
	policyError = "error"
)

// timeline counts real and policy answers per step.
func timeline(answers []answer, step time.Duration) string {
	var b strings.Builder
	var real, pol int
	cur := time.Duration(0)
	for _, a := range answers {
		for a.at >= cur+step {
			fmt.Fprintf(&b, " %d/%d", real, pol)
			real, pol, cur = 0, 0, cur+step
		}
		if a.kind == "real" {
			real++
		} else {
			pol++
		}
	}
	fmt.Fprintf(&b, " %d/%d", real, pol)
	return b.String()
}
