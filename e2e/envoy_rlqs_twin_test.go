package e2e_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// The Rate Limit Quota Service with real Envoys, and each scenario's
// twin on the simulator (docs/rlqs.md, "Real Envoy and the simulator"):
// a twinScenario runs once with Envoy 1.40 processes in front of the
// binary on one Redis, on the wall clock, and once with
// internal/testing/envoysim's Envoys in front of the service in process,
// on a manual clock; both count what each Envoy admitted in each report
// period of the scenario.

// twinPeriod is Envoy's report period, whatever its config says.
const twinPeriod = 5 * time.Second

// twinBucket is the bucket every scenario's requests are in: {name: e},
// 100/s in e2e/testdata/rlqs.yaml.
var twinBucket = map[string]string{"name": "e"}

const twinLimit = 100.0

// twinEnvoy is one Envoy of a scenario.
type twinEnvoy struct {
	// hosts are the replicas its RLQS cluster lists, in priority order.
	hosts []int
	// rate is its load's rate from its start.
	rate float64
	// join, if positive, is when its load starts; else the Envoys start
	// 100 ms apart, in order, so that their reports come in that order
	// on the wall clock and on the simulator's alike.
	join time.Duration
}

// stagger is the time between two Envoys' starts, unless they join.
const stagger = 100 * time.Millisecond

// startAt is when Envoy i's load starts.
func (sc *twinScenario) startAt(i int) time.Duration {
	if j := sc.envoys[i].join; j > 0 {
		return j
	}
	return time.Duration(i) * stagger
}

// twinEvent is something that happens at a time of a scenario.
type twinEvent struct {
	at time.Duration
	do func(twinDriver)
}

// twinDriver runs a scenario's events on the real processes or the
// simulator.
type twinDriver interface {
	setRate(envoy int, rate float64)
	startLoad(envoy int)
	killEnvoy(envoy int)
	killReplica(r int)
	startReplica(r int)
}

// twinScenario is a scenario both ways.
type twinScenario struct {
	name     string
	replicas int
	// late, if positive for a replica, is when it starts (else before 0).
	late    map[int]time.Duration
	envoys  []twinEnvoy
	events  []twinEvent
	periods int
}

// twinResult is what each Envoy admitted (200) and was denied (429) in
// each period of a run: [period][envoy].
type twinResult struct {
	admitted, denied [][]float64
	// starts are when each Envoy's load started, from the scenario's 0.
	starts []time.Duration
}

// total is what the Envoys admitted in period k, per second.
func (r twinResult) total(k int) float64 {
	s := 0.0
	for _, a := range r.admitted[k] {
		s += a
	}
	return s / twinPeriod.Seconds()
}

// rate is what Envoy i admitted in period k, per second.
func (r twinResult) rate(k, i int) float64 { return r.admitted[k][i] / twinPeriod.Seconds() }

func (sc *twinScenario) sortedEvents() []twinEvent {
	evs := slices.Clone(sc.events)
	for i := range sc.envoys {
		evs = append(evs, twinEvent{sc.startAt(i), func(d twinDriver) { d.startLoad(i) }})
	}
	for r, at := range sc.late {
		evs = append(evs, twinEvent{at, func(d twinDriver) { d.startReplica(r) }})
	}
	slices.SortStableFunc(evs, func(a, b twinEvent) int { return int(a.at - b.at) })
	return evs
}

// twinRules are the rules both runs divide by: e2e/testdata/rlqs.yaml.
func twinRules(t *testing.T) *descriptors.Set {
	t.Helper()
	l, err := rules.Parse(map[string][]byte{"rlqs.yaml": []byte(rlqsRules)})
	if err != nil {
		t.Fatal(err)
	}
	return l.Set
}

// ---- real Envoys, the binary, Redis, on the wall clock ----

type realTwin struct {
	t      *testing.T
	sc     *twinScenario
	rules  string
	redis  string
	grpc   []string
	reps   []*fastlimit
	envoys []*envoytest.Envoy
	listen []string
	loads  []*envoytest.Load
	t0     time.Time
}

// runReal runs sc with Envoy processes.
func runReal(t *testing.T, sc *twinScenario) twinResult {
	t.Helper()
	r := &realTwin{t: t, sc: sc, rules: files.Dir(t, map[string]string{"rules.yaml": rlqsRules}),
		redis: "redis://" + redistest.StartServer(t).Addr}
	for range sc.replicas {
		r.grpc = append(r.grpc, loopback.Addr(t))
	}
	r.reps = make([]*fastlimit, sc.replicas)
	for i := range sc.replicas {
		if sc.late[i] == 0 {
			r.startReplica(i)
		}
	}
	for i, e := range sc.envoys {
		var hosts []string
		for _, h := range e.hosts {
			hosts = append(hosts, r.grpc[h])
		}
		listen := envoytest.ListenerAddr(t)
		cfg, err := envoytest.RLQS{Listen: listen, Servers: hosts, Domain: "d", Expired: 10, ExpiredTimeout: 300 * time.Second,
			KeepaliveInterval: 12 * time.Second, KeepaliveTimeout: 3 * time.Second, HealthChecks: true, Priorities: true}.Bootstrap()
		if err != nil {
			t.Fatal(err)
		}
		r.envoys = append(r.envoys, envoytest.Start(t, cfg, envoytest.Options{Name: fmt.Sprintf("%s-%d", sc.name, i)}))
		r.listen = append(r.listen, listen)
	}
	for i, e := range sc.envoys {
		if up := e.hosts[0]; sc.late[up] == 0 {
			r.envoys[i].WaitHealthy(t, "rlqs", 30*time.Second)
		}
	}
	r.loads = make([]*envoytest.Load, len(sc.envoys))
	r.t0 = time.Now()
	for _, ev := range sc.sortedEvents() {
		<-time.After(time.Until(r.t0.Add(ev.at)))
		ev.do(r)
	}
	end := r.t0.Add(time.Duration(sc.periods) * twinPeriod)
	<-time.After(time.Until(end) + 100*time.Millisecond)
	res := twinResult{starts: make([]time.Duration, len(sc.envoys))}
	for k := range sc.periods {
		from := r.t0.Add(time.Duration(k) * twinPeriod)
		var adm, den []float64
		for _, l := range r.loads {
			var c envoytest.Count
			if l != nil {
				c = l.Between(from, from.Add(twinPeriod))
			}
			adm, den = append(adm, float64(c.OK)), append(den, float64(c.Denied))
		}
		res.admitted, res.denied = append(res.admitted, adm), append(res.denied, den)
	}
	for i, l := range r.loads {
		if l != nil {
			res.starts[i] = l.Start().Sub(r.t0)
			var c envoytest.Count
			c = l.Between(r.t0, end)
			if c.Failed > 0 {
				t.Errorf("envoy %d: %d requests failed (neither 200 nor 429)", i, c.Failed)
			}
		}
	}
	return res
}

func (r *realTwin) startReplica(i int) {
	admin := loopback.Addr(r.t)
	f := start(r.t, launch{rules: r.rules, flags: []string{"--redis-url", r.redis, "--rlqs", "--rlqs-replica", fmt.Sprintf("r%d", i),
		"--admin-addr", admin, "--grpc-addr", r.grpc[i]}})
	f.GRPC, f.Admin = r.grpc[i], admin
	r.reps[i] = f
}

func (r *realTwin) startLoad(i int) {
	r.loads[i] = envoytest.StartLoad(r.t, r.listen[i], map[string]string{"x-bucket": twinBucket["name"]}, r.sc.envoys[i].rate)
}

func (r *realTwin) setRate(i int, rate float64) { r.loads[i].SetRate(rate) }

func (r *realTwin) killEnvoy(i int) {
	r.loads[i].Stop()
	r.envoys[i].Kill()
}

func (r *realTwin) killReplica(i int) { _ = r.reps[i].cmd.Process.Kill() }

// ---- the simulator, the service in process, on a manual clock ----

type simTwin struct {
	t        *testing.T
	sc       *twinScenario
	clock    *envoysim.ManualClock
	fleet    envoysim.Fleet
	reps     []*simReplica
	envoys   []*envoysim.Envoy
	traffic  []*envoysim.Traffic
	clusters []*envoysim.Priorities
}

// simReplica is one replica: the service on an in-process gRPC server.
type simReplica struct {
	svc  *rlqs.Service
	gs   *grpc.Server
	dial envoysim.Dialer
	down atomic.Bool // its store refuses it (killed)
	dead bool
}

// downable is a replica's way to the shared demand store.
type downable struct {
	*demand.Memory
	r *simReplica
}

func (d downable) Exchange(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error) {
	if d.r.down.Load() {
		return nil, context.DeadlineExceeded
	}
	return d.Memory.Exchange(ctx, items, ttl, now)
}

// runSim runs sc on the simulator.
func runSim(t *testing.T, sc *twinScenario) twinResult {
	t.Helper()
	set := twinRules(t)
	s := &simTwin{t: t, sc: sc, clock: envoysim.NewManualClock(time.Unix(1_900_000_000, 0))}
	tally := envoysim.NewTally()
	mem := demand.NewMemory(s.clock.Now)
	for i := range sc.replicas {
		rep := &simReplica{}
		svc, err := rlqs.New(rlqs.Options{Rules: func() *descriptors.Set { return set }, Store: downable{mem, rep},
			Now: s.clock.Now, Replica: fmt.Sprintf("r%d", i), Log: zaptest.NewLogger(t), SilenceCheck: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rep.svc = svc
		cc, gs := envoysim.InProcess(t, svc.Register, grpc.ChainStreamInterceptor(tally.Interceptor()))
		rep.gs, rep.dial = gs, tally.Dialer(envoysim.GRPCDialer(cc))
		s.reps = append(s.reps, rep)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = svc.Close(ctx)
		})
	}
	// Each replica watches for the others' notices from its first
	// stream on: open one now, so that no notice of the run is lost to a
	// watch not yet listening.
	for _, r := range s.reps {
		st, err := r.dial(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		_ = st.CloseSend()
	}
	wait.For(t, 10*time.Second, func() bool { return mem.Watchers() == len(s.reps) })
	s.fleet.Tally = tally
	s.fleet.Idle = func() bool {
		if mem.Notices() != 0 {
			return false
		}
		for _, r := range s.reps {
			if !r.dead && !r.svc.Idle() {
				return false
			}
		}
		return true
	}
	for i, e := range sc.envoys {
		var hosts []envoysim.Dialer
		for _, h := range e.hosts {
			hosts = append(hosts, s.reps[h].dial)
		}
		p := envoysim.NewPriorities(s.clock, envoysim.HealthCheck{Interval: time.Second, Unhealthy: 2, Healthy: 1}, hosts...)
		for j, h := range e.hosts {
			if sc.late[h] > 0 {
				p.SetDown(j, true)
			}
		}
		s.clusters = append(s.clusters, p)
		env, err := envoysim.New(envoysim.Config{Domain: "d",
			NoAssignment: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}},
			Expired:      &envoysim.Fallback{Strategy: envoysim.TokenBucket(10, 10, time.Second), Timeout: 300 * time.Second},
		}, s.clock, p.Dial)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(env.Close)
		s.envoys = append(s.envoys, env)
		s.fleet.Add(env)
		_ = i
	}
	s.traffic = make([]*envoysim.Traffic, len(sc.envoys))
	var elapsed time.Duration
	res := twinResult{starts: make([]time.Duration, len(sc.envoys))}
	last := make([]envoysim.Counts, len(sc.envoys))
	evs := sc.sortedEvents()
	for k := range sc.periods {
		end := time.Duration(k+1) * twinPeriod
		for len(evs) > 0 && evs[0].at < end {
			s.fleet.Run(s.clock, evs[0].at-elapsed)
			elapsed = evs[0].at
			evs[0].do(s)
			evs = evs[1:]
		}
		s.fleet.Run(s.clock, end-elapsed)
		elapsed = end
		var adm, den []float64
		for i, e := range s.envoys {
			c := e.Counts(twinBucket)
			adm, den = append(adm, float64(c.Allowed-last[i].Allowed)), append(den, float64(c.Denied-last[i].Denied))
			last[i] = c
		}
		res.admitted, res.denied = append(res.admitted, adm), append(res.denied, den)
	}
	for i := range sc.envoys {
		res.starts[i] = sc.startAt(i)
	}
	if v := s.fleet.Violations(); v.Total() != 0 {
		t.Errorf("simulator: protocol violations: %v", v)
	}
	return res
}

func (s *simTwin) startLoad(i int) {
	s.traffic[i] = s.fleet.Send(s.envoys[i], twinBucket, s.sc.envoys[i].rate)
}

func (s *simTwin) setRate(i int, rate float64) { s.traffic[i].SetRate(rate) }

func (s *simTwin) killEnvoy(i int) { s.fleet.Remove(s.envoys[i]) }

func (s *simTwin) killReplica(i int) {
	r := s.reps[i]
	r.down.Store(true)
	r.gs.Stop()
	r.dead = true
	for j, e := range s.sc.envoys {
		for k, h := range e.hosts {
			if h == i {
				s.clusters[j].SetDown(k, true)
			}
		}
	}
}

func (s *simTwin) startReplica(i int) {
	for j, e := range s.sc.envoys {
		for k, h := range e.hosts {
			if h == i {
				s.clusters[j].SetDown(k, false)
			}
		}
	}
}

// ---- both, side by side ----

// twinTable is the scenario's table of docs/rlqs.md: the admitted total
// of each period, real and simulated.
func twinTable(sc *twinScenario, real, sim twinResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s | period | real Envoy | simulator | difference | real, per Envoy | simulator, per Envoy\n", sc.name)
	for k := range sc.periods {
		rt, st := real.total(k), sim.total(k)
		diff := 0.0
		if st > 0 {
			diff = 100 * (rt - st) / st
		}
		var re, se []string
		for i := range sc.envoys {
			re, se = append(re, fmt.Sprintf("%.1f", real.rate(k, i))), append(se, fmt.Sprintf("%.1f", sim.rate(k, i)))
		}
		fmt.Fprintf(&b, "%s | %d | %.1f | %.1f | %+.1f%% | %s | %s\n", sc.name, k, rt, st, diff, strings.Join(re, " "), strings.Join(se, " "))
	}
	return b.String()
}

// runTwins runs sc both ways, the simulator's first (it takes seconds),
// and logs them side by side; TWIN_TABLE names a file that collects the
// tables.
func runTwins(t *testing.T, sc *twinScenario) (real, sim twinResult) {
	t.Helper()
	sim = runSim(t, sc)
	real = runReal(t, sc)
	table := twinTable(sc, real, sim)
	t.Logf("admitted per second, per period:\n%s", table)
	if path := os.Getenv("TWIN_TABLE"); path != "" {
		twinTableMu.Lock()
		defer twinTableMu.Unlock()
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, _ = f.WriteString(table)
			_ = f.Close()
		}
	}
	return real, sim
}

var twinTableMu sync.Mutex

// twinScenarios are the scenarios of docs/rlqs.md's table, on {name: e}'s
// 100/s; the Envoys' first requests come at 0, so that they report at 5 s,
// 10 s, ..., and period k is [5k s, 5k+5 s).
func twinScenarios() []*twinScenario {
	kill := func(i int) func(twinDriver) { return func(d twinDriver) { d.killEnvoy(i) } }
	rate := func(i int, r float64) func(twinDriver) { return func(d twinDriver) { d.setRate(i, r) } }
	return []*twinScenario{
		{name: "steady", replicas: 2, periods: 4, envoys: []twinEnvoy{
			{hosts: []int{0, 1}, rate: 150}, {hosts: []int{1, 0}, rate: 50}, {hosts: []int{0, 1}, rate: 20}}},
		{name: "shift", replicas: 2, periods: 6, envoys: []twinEnvoy{
			{hosts: []int{0, 1}, rate: 150}, {hosts: []int{1, 0}, rate: 150}, {hosts: []int{0, 1}, rate: 150}},
			events: []twinEvent{{13 * time.Second, rate(1, 5)}, {13 * time.Second, rate(2, 5)}}},
		{name: "join", replicas: 2, periods: 6, envoys: []twinEnvoy{
			{hosts: []int{0, 1}, rate: 150}, {hosts: []int{1, 0}, rate: 150}, {hosts: []int{1, 0}, rate: 150, join: 11500 * time.Millisecond}}},
		{name: "envoy killed", replicas: 2, periods: 6, envoys: []twinEnvoy{
			{hosts: []int{0, 1}, rate: 150}, {hosts: []int{1, 0}, rate: 150}, {hosts: []int{0, 1}, rate: 150}},
			events: []twinEvent{{12 * time.Second, kill(2)}}},
		{name: "replica killed", replicas: 2, periods: 8, envoys: []twinEnvoy{
			{hosts: []int{0, 1}, rate: 150}, {hosts: []int{1, 0}, rate: 50}, {hosts: []int{0, 1}, rate: 20}},
			events: []twinEvent{{14700 * time.Millisecond, func(d twinDriver) { d.killReplica(0) }}}},
		{name: "moved", replicas: 2, periods: 6, late: map[int]time.Duration{1: 10500 * time.Millisecond}, envoys: []twinEnvoy{
			{hosts: []int{0}, rate: 100}, {hosts: []int{1}, rate: 500, join: 5 * time.Second}}},
	}
}

// TestEnvoyRLQS runs the scenarios of twinScenarios.
func TestEnvoyRLQS(t *testing.T) {
	for _, sc := range twinScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runTwins(t, sc)
		})
	}
}
