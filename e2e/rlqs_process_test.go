package e2e_test

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// TestRLQSProcess: with --rlqs-process, a real Envoy's quota filter is
// served by the child on --rlqs-addr and enforces its assignment, while
// the parent answers RateLimitService; the child runs at --rlqs-nice on
// every thread, its RLQS series are on the parent's /metrics, a killed
// child is started again and Envoy's stream comes back to it, and the
// parent's stop ends the child.
func TestRLQSProcess(t *testing.T) {
	t.Parallel()
	rlqsAddr, admin := loopback.Addr(t), loopback.Addr(t)
	f := start(t, launch{rules: files.Dir(t, map[string]string{"rules.yaml": rlqsRules}), flags: []string{
		"--redis-url", "redis://" + redistest.StartServer(t).Addr, "--admin-addr", admin,
		"--rlqs", "--rlqs-addr", rlqsAddr, "--rlqs-process", "--rlqs-nice", "15"}})
	childPID := func() int {
		t.Helper()
		var pid int
		wait.For(t, 30*time.Second, func() bool { pid = childOf(f.p.Pid()); return pid != 0 })
		return pid
	}
	first := childPID()
	// The child lowers its priority as it starts, every thread of it.
	var nices map[int]int
	if !wait.True(30*time.Second, func() bool {
		nices = threadNices(t, first)
		for _, n := range nices {
			if n != 15 {
				return false
			}
		}
		return len(nices) > 0
	}) {
		t.Errorf("the rlqs process's threads have nice values %v, want 15", nices)
	}
	if nice := threadNices(t, f.p.Pid())[f.p.Pid()]; nice != 0 {
		t.Errorf("the parent has nice %d, want 0", nice)
	}

	// RateLimitService on the parent's --grpc-addr.
	resp, err := f.Client.ShouldRateLimit(ctxTimeout(t, 10*time.Second), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*common.RateLimitDescriptor{desc("name", "a")}})
	if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit on the parent: %v, %v", resp, err)
	}

	// A real Envoy's quota filter on the child's --rlqs-addr: {name: e}
	// is 100/s over every Envoy, so back-to-back requests are denied once
	// the assignment has arrived.
	e, get := factsEnvoy(t, rlqsAddr, "process", nil)
	assigned := func() int { return strings.Count(e.Log(), "A new TokenBucket has been configured") }
	if code := get("e"); code != http.StatusOK {
		t.Fatalf("the first request of a bucket: %d, want 200 (ALLOW_ALL until assigned)", code)
	}
	wait.For(t, 30*time.Second, func() bool { return assigned() > 0 })
	denied := 0
	for range 400 {
		if get("e") == http.StatusTooManyRequests {
			denied++
		}
	}
	if denied == 0 {
		t.Errorf("no request of 400 back to back was denied on a 100/s assignment; envoy log:\n%s", e.Log())
	}
	page := metricsPage(t, admin)
	if got := scrape.Value(t, page, `fastlimit_rlqs_streams{domain="d"}`); got != 1 {
		t.Errorf("the parent's /metrics: fastlimit_rlqs_streams %v, want the child's 1", got)
	}
	if got := scrape.Value(t, page, `fastlimit_rlqs_reports_total{domain="d"}`); got < 1 {
		t.Errorf("the parent's /metrics: fastlimit_rlqs_reports_total %v, want the child's count", got)
	}

	// The parent's admin listener holds no buckets, and says where they are.
	if code, body := scrape.Get(t, "http://"+admin+"/v1/quota?domain=d&bucket=name=e"); code != http.StatusNotFound || !strings.Contains(body, "--rlqs-process") {
		t.Errorf("/v1/quota on the parent: %d %q, want 404 naming --rlqs-process", code, body)
	}

	// A killed child is started again; Envoy's stream reconnects at its
	// next report and is assigned again.
	before := assigned()
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, func() bool {
		return scrape.Value(t, metricsPage(t, admin), "fastlimit_rlqs_process_restarts_total") == 1
	})
	second := childPID()
	if second == first {
		t.Fatalf("child %d not replaced", first)
	}
	// Envoy reports every 5 s: a request now keeps its bucket live.
	wait.For(t, 60*time.Second, func() bool { get("e"); return assigned() > before })

	f.Stop()
	wait.For(t, 30*time.Second, func() bool { return syscall.Kill(second, 0) != nil })
}

// childOf returns a child process of pid, 0 if it has none.
func childOf(pid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields("/proc/" + e.Name() + "/stat"); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			return p
		}
	}
	return 0
}

// threadNices returns the nice value of each thread of pid.
func threadNices(t *testing.T, pid int) map[int]int {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, task := range tasks {
		f := statFields(dir + "/" + task.Name() + "/stat")
		if len(f) < 17 {
			continue
		}
		tid, _ := strconv.Atoi(task.Name())
		out[tid], _ = strconv.Atoi(f[16])
	}
	return out
}

// statFields are a /proc stat file's fields after the command's name
// (state first), none if it cannot be read.
func statFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return nil
	}
	return strings.Fields(s[i+2:])
}
