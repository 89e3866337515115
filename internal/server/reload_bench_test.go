package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fastlimit/fastlimit/internal/source/reload"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// Figures of TestReloadLatency, the 10,000-rule reload measurement.
const (
	benchFiles       = 10
	benchRulesPer    = 1000 // rules per file: 10,000 in all
	benchWorkers     = 4
	benchInterval    = 2 * time.Millisecond // per worker: 2,000 requests/s in all
	benchPhase       = 5 * time.Second
	benchReloadEvery = 250 * time.Millisecond
)

// TestReloadLatency measures ShouldRateLimit latency over gRPC while a
// 10,000-rule directory is reloaded over and over, against a baseline
// without reloads, and prints the figures. It runs only with
// FASTLIMIT_BENCH=1:
//
//	FASTLIMIT_BENCH=1 go test -run TestReloadLatency -v ./internal/server/
func TestReloadLatency(t *testing.T) {
	if os.Getenv("FASTLIMIT_BENCH") == "" {
		t.Skip("set FASTLIMIT_BENCH=1 to measure")
	}
	dir := t.TempDir()
	for f := range benchFiles {
		files.Write(t, filepath.Join(dir, fmt.Sprintf("bench%d.yaml", f)), benchRules(f, 1_000_000))
	}
	s := testServerOn(t, dir, zap.NewNop())
	if n := len(s.rules.Current().Set.Limits()); n != benchFiles*benchRulesPer {
		t.Fatalf("%d limits loaded", n)
	}
	conn, err := grpc.NewClient(s.grpcLis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)

	t.Logf("GOMAXPROCS=%d, %s, %d rules in %d files, %d workers at 1 request per %s each, %s per phase, memory store, gRPC over loopback",
		runtime.GOMAXPROCS(0), runtime.Version(), benchFiles*benchRulesPer, benchFiles, benchWorkers, benchInterval, benchPhase)
	base := measure(t, client, nil)
	t.Logf("no reloads:              %s", base)
	for _, every := range []time.Duration{time.Second, 0} {
		var reloads []time.Duration
		during := measure(t, client, func(stop <-chan struct{}) {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(every):
				}
				// Rewrite one file: every reload reads and compiles all
				// 10,000 rules.
				prev := s.rules.Current()
				start := time.Now()
				files.Write(t, filepath.Join(dir, "bench0.yaml"), benchRules(0, uint32(2_000_000+i)))
				poll := time.NewTicker(time.Millisecond) // the write-to-effect time, to the millisecond
				for s.rules.Current() == prev {
					<-poll.C
				}
				poll.Stop()
				reloads = append(reloads, time.Since(start))
			}
		})
		what := "reload every 1s:"
		if every == 0 {
			what = "back-to-back reloads:"
		}
		t.Logf("%-24s %s", what, during)
		t.Logf("%-24s %d reloads, write-to-effect (incl. %s debounce) p50 %s, max %s", "",
			len(reloads), reload.DefaultDebounce, pct(reloads, 0.50).Round(time.Millisecond), pct(reloads, 1).Round(time.Millisecond))
		if during.failed > 0 {
			t.Fatalf("%d requests failed during reloads", during.failed)
		}
	}
}

type figures struct {
	n, failed               int
	p50, p99, p999, maxTook time.Duration
	gcs                     uint32
	gcPause                 time.Duration
}

func (f figures) String() string {
	return fmt.Sprintf("%6d requests, p50 %7s  p99 %7s  p99.9 %7s  max %7s; %3d GCs, %s STW", f.n,
		f.p50.Round(time.Microsecond), f.p99.Round(time.Microsecond), f.p999.Round(time.Microsecond),
		f.maxTook.Round(time.Microsecond), f.gcs, time.Duration(f.gcPause).Round(time.Microsecond))
}

// measure runs benchWorkers callers, each paced at one request per
// benchInterval so that latency shows stalls rather than queueing behind
// a saturated CPU, for benchPhase, with during running
// alongside until they stop, and returns the latency figures.
func measure(t *testing.T, client rlspb.RateLimitServiceClient, during func(stop <-chan struct{})) figures {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	lat := make([][]time.Duration, benchWorkers)
	failed := make([]int, benchWorkers)
	for w := range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			tick := time.NewTicker(benchInterval)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				req := rlsRequest(fmt.Sprintf("bench%d", rng.IntN(benchFiles)), "k", fmt.Sprintf("v%d", rng.IntN(benchRulesPer)))
				start := time.Now()
				_, err := client.ShouldRateLimit(context.Background(), req)
				lat[w] = append(lat[w], time.Since(start))
				if err != nil {
					failed[w]++
				}
			}
		}()
	}
	done := make(chan struct{})
	if during != nil {
		go func() { during(stop); close(done) }()
	} else {
		close(done)
	}
	phase := time.NewTimer(benchPhase) // the measurement's length
	<-phase.C
	close(stop)
	wg.Wait()
	<-done
	runtime.ReadMemStats(&after)
	all := slices.Concat(lat...)
	f := figures{n: len(all), p50: pct(all, .5), p99: pct(all, .99), p999: pct(all, .999), maxTook: pct(all, 1),
		gcs: after.NumGC - before.NumGC, gcPause: time.Duration(after.PauseTotalNs - before.PauseTotalNs)}
	for _, n := range failed {
		f.failed += n
	}
	return f
}

// pct returns the q-quantile of ds (sorting it).
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// benchRules is file f's domain of benchRulesPer rules, one per value.
func benchRules(f int, rpu uint32) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: bench%d\ndescriptors:\n", f)
	for i := range benchRulesPer {
		fmt.Fprintf(&b, "  - key: k\n    value: v%d\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", i, rpu)
	}
	return b.String()
}

// BenchmarkReload10k measures one reload of a 10,000-rule directory
// whose content changed: read, parse, validate, compile, swap.
func BenchmarkReload10k(b *testing.B) {
	dir := b.TempDir()
	for f := range benchFiles {
		files.Write(b, filepath.Join(dir, fmt.Sprintf("bench%d.yaml", f)), benchRules(f, 1_000_000))
	}
	r, _, _, _ := newTestRules(b, dir)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		files.Write(b, filepath.Join(dir, "bench0.yaml"), benchRules(0, uint32(2_000_000+i)))
		if changed, err := r.load(); err != nil || !changed {
			b.Fatalf("reload: %v, %v", changed, err)
		}
	}
}
