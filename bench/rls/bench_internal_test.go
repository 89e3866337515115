package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// These tests run bench/rls for real: FastLimit built from this tree,
// real redis-server processes, real load. Runs are kept short (about 7 s
// of load in all): closed-loop load saturates the machine, and other
// packages' timing tests may run beside these. They check that every
// figure is there and plausible, not its value.

var (
	buildDir  string
	buildOnce sync.Once
	built     *binary
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// needTools skips the test in -short mode, or when redis-server, redis-cli
// or go is missing (fails it with FASTLIMIT_REQUIRE_REDIS=1).
func needTools(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: runs servers, Redis and load for seconds")
	}
	for _, tool := range []string{"redis-server", "redis-cli", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("FASTLIMIT_REQUIRE_REDIS") == "1" {
				t.Fatalf("%s not found and FASTLIMIT_REQUIRE_REDIS=1", tool)
			}
			t.Skipf("%s not found", tool)
		}
	}
}

// fastlimit builds ./cmd/server once for every test, as bench/rls does.
func fastlimit(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "bench-test-")
		if buildErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			built, buildErr = buildFastLimit(ctx, repoRoot(), buildDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built.path
}

// quick runs bench/rls with args (and --server) and returns its results
// and the report it printed.
func quick(t *testing.T, args ...string) (*results, string) {
	t.Helper()
	args = append([]string{"--quick", "--install=false", "--server", fastlimit(t)}, args...)
	o, err := parseFlags(args, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	res, err := execute(ctx, o, &stdout, &stderr)
	t.Logf("bench/rls %s: %v\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	return res, stdout.String()
}

// checkSample fails t unless s holds plausible figures of a run of spec.
func checkSample(t *testing.T, spec runSpec, name string, s *sample) {
	t.Helper()
	where := fmt.Sprintf("%s, %s, round %d", spec.title(), name, s.Round)
	r := s.Report
	switch {
	case r == nil:
		t.Fatalf("%s: no load report", where)
	case r.Decisions() == 0 || r.DecisionsPerSec <= 0:
		t.Errorf("%s: %d decisions, %.0f/s; errors %d, first %s", where, r.Decisions(), r.DecisionsPerSec, r.Errors, r.FirstError)
	case r.Errors > r.Decisions()/10:
		t.Errorf("%s: %d errors for %d decisions, first %s", where, r.Errors, r.Decisions(), r.FirstError)
	case r.Latency.P50 <= 0 || r.Latency.P99 < r.Latency.P50:
		t.Errorf("%s: latency %+v", where, r.Latency)
	case s.ServerCPU < 0 || r.CPUSeconds <= 0:
		t.Errorf("%s: server CPU %v s, loadgen CPU %v s: not read", where, s.ServerCPU, r.CPUSeconds)
	case spec.Callers >= 16 && s.ServerCPU == 0:
		// /proc counts 10 ms ticks: a short run of a few callers may
		// round to none, a busy one cannot.
		t.Errorf("%s: no server CPU in a run of %d callers", where, spec.Callers)
	case s.perDecision(s.ServerCPU) > 1e5:
		t.Errorf("%s: %.0f µs of server CPU per decision", where, s.perDecision(s.ServerCPU))
	case spec.store() && (s.RedisCPU <= 0 || s.RedisCommands <= 0):
		t.Errorf("%s: Redis CPU %v s, %d commands: not read", where, s.RedisCPU, s.RedisCommands)
	}
}

// perCallColumn is the "Every run" table's column of decisions per script
// call.
const perCallColumn = 9

// checkRow fails t unless the "Every run" table has a row for spec and
// server with every cell filled (but decisions per script call, for a run
// that calls no script).
func checkRow(t *testing.T, md string, spec runSpec, name string) {
	t.Helper()
	prefix := "| " + spec.title() + " | " + name + " |"
	_, every, _ := strings.Cut(md, "### Every run")
	for line := range strings.SplitSeq(every, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 12 {
			t.Errorf("row %q has %d cells, want 12", line, len(cells))
		}
		for i, c := range cells {
			if i == perCallColumn && !spec.store() {
				continue // no script call, no decisions per call
			}
			if strings.TrimSpace(c) == "" || strings.TrimSpace(c) == "—" {
				t.Errorf("row %q has an empty cell", line)
			}
		}
		return
	}
	t.Errorf("no row %q in the report", prefix)
}

// TestQuickRun is the smoke run of the issue: --quick against FastLimit
// alone, every default scenario, into a file with hand-written text.
func TestQuickRun(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	out, raw := filepath.Join(dir, "BENCHMARKS.md"), filepath.Join(dir, "results.json")
	const head, tail = "# Benchmarks\n\nHand-written.\n\n", "\n\n## Later\n\nAlso hand-written.\n"
	files.Write(t, out, head+beginMarker+"\nold\n"+endMarker+tail)
	res, md := quick(t, "--duration", "400ms", "--warmup", "50ms", "--out", out, "--raw", raw)

	specs := plan(&options{scenarios: strings.Split(defaultScenarios, ","), callers: 64, sweep: []int{1, 4, 16, 64, 256}})
	if len(res.Runs) != len(specs) {
		t.Fatalf("%d runs, want %d", len(res.Runs), len(specs))
	}
	for _, spec := range specs {
		rr := res.find(spec)
		if rr == nil || len(rr.Samples) != 1 || len(rr.Samples[0]) != 1 {
			t.Fatalf("%s: samples %+v, want one round of FastLimit", spec.title(), rr)
		}
		checkSample(t, spec, "FastLimit", rr.Samples[0][0])
		checkRow(t, md, spec, "FastLimit")
	}
	reportHas(t, md,
		"| **Redis CPU per decision, 1 descriptor** | ", "| **Redis CPU per decision, 3 descriptors** | ",
		"| p50 at 1 caller, 1 descriptor | ", "| p99, 1 descriptor | ",
		"### Redis CPU per decision against callers", "| 256 | ",
		"| FastLimit decisions/s, fixed window against `unlimited`",
		"| load average (1, 5, 15 min) before / after | ", "| redis-server | ", "| Go (bench/rls) | go1.",
	)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := head + beginMarker + "\n\n" + strings.TrimSpace(md) + "\n\n" + endMarker + tail; string(b) != want {
		t.Errorf("--out file:\n%s\nwant the report between the markers, the rest untouched", b)
	}
	var back results
	if b, err = os.ReadFile(raw); err != nil || json.Unmarshal(b, &back) != nil || len(back.Runs) != len(specs) {
		t.Errorf("--raw file: %v, %d runs", err, len(back.Runs))
	}
}

// TestQuickCompare runs two servers, FastLimit against a second FastLimit
// (configured like any --compare binary of its kind), interleaved.
func TestQuickCompare(t *testing.T) {
	needTools(t)
	res, md := quick(t, "--compare", fastlimit(t), "--compare-env", "GOGC=100", "--scenarios", "fw,sw",
		"--rounds", "2", "--duration", "200ms", "--warmup", "0s")
	if len(res.Binaries) != 2 || res.Binaries[1].Name != "FastLimit B" || res.Binaries[1].Env[0] != "GOGC=100" {
		t.Fatalf("servers %+v", res.Binaries)
	}
	for _, rr := range res.Runs {
		a, b := rr.Samples[0], rr.Samples[1]
		if len(a) != 2 || len(b) != 2 {
			t.Fatalf("%s: %d and %d rounds, want 2 each", rr.Spec.title(), len(a), len(b))
		}
		// A, B, then B, A.
		if !(a[0].Started.Before(b[0].Started) && b[0].Started.Before(b[1].Started) && b[1].Started.Before(a[1].Started)) {
			t.Errorf("%s: runs not interleaved: %v %v %v %v", rr.Spec.title(), a[0].Started, b[0].Started, a[1].Started, b[1].Started)
		}
		for i, name := range []string{"FastLimit", "FastLimit B"} {
			for _, s := range rr.Samples[i] {
				checkSample(t, rr.Spec, name, s)
			}
			checkRow(t, md, rr.Spec, name)
		}
		if len(ratios(a, b, mRate)) != 2 {
			t.Errorf("%s: ratios %v, want one per round", rr.Spec.title(), ratios(a, b, mRate))
		}
	}
	reportHas(t, md,
		"| fixed window, 1 descriptor, 64 callers | FastLimit/FastLimit B | ",
		"| Redis CPU per decision, 64 callers, 1 descriptor | ≤ 0.33x | ",
		"|  | FastLimit | FastLimit B | FastLimit/FastLimit B |",
	)
}

// TestQuickCluster runs the cluster scenario: a Redis Cluster of three
// masters, CPU summed over them.
func TestQuickCluster(t *testing.T) {
	needTools(t)
	res, md := quick(t, "--scenarios", "cluster", "--duration", "300ms", "--warmup", "50ms")
	if len(res.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(res.Runs))
	}
	for _, rr := range res.Runs {
		if !rr.Spec.Cluster || len(rr.Samples[0]) != 1 {
			t.Fatalf("%+v", rr)
		}
		checkSample(t, rr.Spec, "FastLimit", rr.Samples[0][0])
		checkRow(t, md, rr.Spec, "FastLimit")
	}
	if !strings.Contains(md, "| Redis CPU per decision, Redis Cluster, 3 descriptors | ") {
		t.Errorf("report lacks the cluster summary:\n%s", md)
	}
}

// TestQuickNullAndVariants runs FastLimit, a variant of it and the null
// server along a short sweep of the minute's window: the null server has
// no Redis, every FastLimit server its own, and the report has the
// concurrency, commandstats, variants and rounds tables.
func TestQuickNullAndVariants(t *testing.T) {
	needTools(t)
	res, md := quick(t, "--compare-null", "--variant", "batches 1=--redis-batches 1", "--scenarios", "sweepm", "--sweep", "1,4",
		"--duration", "300ms", "--warmup", "50ms")
	if len(res.Binaries) != 3 || res.Binaries[1].Role != roleVariant || res.Binaries[2].Role != roleNull ||
		!slices.Equal(res.Binaries[1].Args, []string{"--store-timeout", "2s", "--drain", "0s", "--redis-batches", "1"}) {
		t.Fatalf("servers %+v", res.Binaries)
	}
	for _, rr := range res.Runs {
		if len(rr.Rounds) != 1 || rr.Rounds[0].Void {
			t.Errorf("%s: rounds %+v, want one, not void (--quick ignores the load)", rr.Spec.title(), rr.Rounds)
		}
		for i, name := range []string{"FastLimit", "batches 1", "null server"} {
			if len(rr.Samples[i]) != 1 {
				t.Fatalf("%s, %s: %d samples", rr.Spec.title(), name, len(rr.Samples[i]))
			}
			s := rr.Samples[i][0]
			if s.NoRedis != (i == 2) || i < 2 && (s.RedisCPU <= 0 || s.timed("evalsha").Calls <= 0) || s.Report.Decisions() == 0 {
				t.Errorf("%s, %s: %+v", rr.Spec.title(), name, s)
			}
			// One caller: a phase of FastLimit's load and the plain script
			// beside it follows, on the same Redis.
			if p := s.Plain; (i < 2 && rr.Spec.Callers == 1) != (p.ratio() > 0) {
				t.Errorf("%s, %s: plain phase %+v", rr.Spec.title(), name, p)
			}
		}
	}
	reportHas(t, md,
		"### Against callers: Redis and server CPU per decision (fixed window per minute, 1 descriptor)",
		"| server CPU per decision, FastLimit / null server |",
		"### Redis' own time per command at 1 caller (INFO commandstats)",
		"| fixed window per minute, 1 descriptor, 1 caller | FastLimit | ",
		"| plain script's µs a call (FCALL) | / plain script |",
		"### FastLimit variants",
		"| fixed window per minute, 1 descriptor, 4 callers | batches 1 | ",
		"### Rounds and the machine's load",
		"| null server | `./bench/nullrls`",
	)
}

// TestQuickOpenLoop runs the open scenario at one rate against FastLimit
// and the null server: requests arrive whatever the servers do, the same
// schedule for both, and the report has the open loop's table.
func TestQuickOpenLoop(t *testing.T) {
	needTools(t)
	res, md := quick(t, "--compare-null", "--scenarios", "open", "--rates", "400", "--duration", "500ms", "--warmup", "50ms")
	if len(res.Runs) != 2 {
		t.Fatalf("%d runs, want 1 and 3 descriptors at 400/s", len(res.Runs))
	}
	for _, rr := range res.Runs {
		if rr.Spec.Rate != 400 || rr.Spec.Callers != 0 {
			t.Fatalf("run %+v", rr.Spec)
		}
		var arrivals []int64
		for i, name := range []string{"FastLimit", "null server"} {
			s := rr.Samples[i][0]
			if i == 0 {
				checkSample(t, rr.Spec, name, s)
				checkRow(t, md, rr.Spec, name)
			}
			o := s.Report.Open
			if o == nil || o.Rate != 400 || s.Report.Requests != o.Arrivals {
				t.Fatalf("%s, %s: open loop %+v, %d requests", rr.Spec.title(), name, o, s.Report.Requests)
			}
			arrivals = append(arrivals, o.Arrivals)
		}
		// 200 expected; the same schedule for both servers.
		if arrivals[0] != arrivals[1] || arrivals[0] < 120 || arrivals[0] > 280 {
			t.Errorf("%s: arrivals %v, want the same, about 200", rr.Spec.title(), arrivals)
		}
	}
	reportHas(t, md,
		"### Open loop: requests arriving at a fixed mean rate",
		"| fixed window per minute, 1 descriptor, 400 a second (open loop) | FastLimit | ",
		"| fixed window per minute, 3 descriptors, 400 a second (open loop) | null server | ",
	)
}

// The servers take turns forward in even rounds and backward in odd ones.
func TestTurns(t *testing.T) {
	for _, tc := range []struct {
		n, r int
		want []int
	}{{2, 0, []int{0, 1}}, {2, 1, []int{1, 0}}, {3, 2, []int{0, 1, 2}}, {3, 3, []int{2, 1, 0}}, {1, 1, []int{0}}} {
		if got := turns(tc.n, tc.r); !slices.Equal(got, tc.want) {
			t.Errorf("turns(%d, %d) = %v, want %v", tc.n, tc.r, got, tc.want)
		}
	}
}
