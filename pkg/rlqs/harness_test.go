package rlqs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
)

var (
	_ rlqs.DemandStore = (*demand.Redis)(nil)
	_ rlqs.DemandStore = (*demand.Memory)(nil)
)

// testRules: name=a is 300/s, name=slow 60/min, name=free unlimited,
// name=blocked 0/s, tier=* (share_threshold) 100/s shared by all tiers.
func testRules(t testing.TB) *descriptors.Set {
	t.Helper()
	s, err := descriptors.NewSet([]descriptors.DomainConfig{{
		Name: "d",
		Descriptors: []descriptors.Descriptor{
			{Key: "name", Value: "a", Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 300}},
			{Key: "name", Value: "b", Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 300}},
			{Key: "name", Value: "slow", Limit: &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 60}},
			{Key: "name", Value: "free", Limit: &descriptors.Limit{Unlimited: true}},
			{Key: "name", Value: "blocked", Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 0}},
			{Key: "tier", Value: "*", ShareThreshold: true, Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 100}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	bucketA = map[string]string{"name": "a"}
	bucketB = map[string]string{"name": "b"}
)

// failing wraps a demand store with a switch that makes every exchange
// fail, as when Redis is down or the replica is cut off from it.
type failing struct {
	rlqs.DemandStore
	down atomic.Bool
}

var errDown = errors.New("store down (test)")

func (f *failing) Exchange(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.DemandStore.Exchange(ctx, items, ttl, now)
}

var _ rlqs.Notifier = (*failing)(nil)

// Notify notifies through the store it wraps, unless down.
func (f *failing) Notify(ctx context.Context, from string, keys []string) error {
	if f.down.Load() {
		return errDown
	}
	return f.DemandStore.(rlqs.Notifier).Notify(ctx, from, keys)
}

// Watch watches the store it wraps, hearing nothing while down.
func (f *failing) Watch(ctx context.Context, fn func(from, key string)) error {
	return f.DemandStore.(rlqs.Notifier).Watch(ctx, func(from, key string) {
		if !f.down.Load() {
			fn(from, key)
		}
	})
}

// replica is one FastLimit replica in process: the service on a gRPC
// server over an in-memory listener.
type replica struct {
	svc   *rlqs.Service
	store *failing
	gs    *grpc.Server
	cc    *grpc.ClientConn
	sw    *envoysim.Switch // the Envoys' way to it
	dead  bool
}

// cluster is replicas sharing one demand store, and a fleet of simulated
// Envoys, all on one manual clock.
type cluster struct {
	t        testing.TB
	clock    *envoysim.ManualClock
	replicas []*replica
	fleet    envoysim.Fleet
	envoys   []*envoysim.Envoy
	period   time.Duration
	tally    *envoysim.Tally // the servers' pushes in flight
	clusters []envoyCluster  // each Envoy's
	slow     slowSends       // the replicas' sends to slow Envoys
	slowNext bool            // the next Envoy added is slow
}

type clusterOptions struct {
	replicas int
	period   time.Duration
	store    rlqs.DemandStore                        // nil: a MemoryDemand on the clock
	wrap     func(rlqs.DemandStore) rlqs.DemandStore // if set, wraps the store
	opts     func(*rlqs.Options)
	rules    func() *descriptors.Set // nil: testRules
	server   []grpc.ServerOption
	// noStore runs the replicas without a demand store: each divides
	// alone, its ledger its own.
	noStore bool
}

func newCluster(t *testing.T, co clusterOptions) *cluster {
	t.Helper()
	if co.replicas == 0 {
		co.replicas = 1
	}
	if co.period == 0 {
		co.period = 5 * time.Second
	}
	c := &cluster{t: t, clock: envoysim.NewManualClock(time.Unix(1_900_000_000, 0)), period: co.period, tally: envoysim.NewTally()}
	shared := co.store
	if shared == nil {
		shared = demand.NewMemory(c.clock.Now)
	}
	mem, _ := shared.(*demand.Memory)
	if co.wrap != nil {
		shared = co.wrap(shared)
	}
	rules := co.rules
	if rules == nil {
		set := testRules(t)
		rules = func() *descriptors.Set { return set }
	}
	warm := mem != nil && !co.noStore // whether to start the replicas' watches now
	for i := range co.replicas {
		opts := rlqs.Options{
			Rules:        rules,
			Log:          zaptest.NewLogger(t),
			Clock:        c.clock,
			Replica:      "r" + string(rune('0'+i)),
			ReportPeriod: co.period,
		}
		if co.opts != nil {
			co.opts(&opts)
		}
		// A test of identities counts the streams it names.
		warm = warm && opts.Identity == nil && !opts.RequireIdentity
		st := &failing{DemandStore: shared}
		if co.noStore {
			st = nil
		}
		c.replicas = append(c.replicas, c.startReplica(opts, st, co.server...))
	}
	c.fleet.Tally = c.tally
	if warm {
		// Each replica watches for the others' notices from its first
		// stream on: open one now, so that none of the run's is lost to a
		// watch not yet listening.
		for _, r := range c.replicas {
			st, err := r.sw.Dial(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			_ = st.CloseSend()
			// Its end comes once the server has let the stream go, so
			// that it does not count against Options.MaxStreams.
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				for {
					if _, err := st.Recv(); err != nil {
						return
					}
				}
			}()
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("the warm-up stream did not end")
			}
		}
		wait.For(t, 10*time.Second, func() bool { return mem.Watchers() == len(c.replicas) })
	}
	c.fleet.Idle = func() bool {
		if mem != nil && mem.Notices() != 0 {
			return false
		}
		for _, r := range c.replicas {
			if !r.dead && !r.svc.Idle() {
				return false
			}
		}
		return true
	}
	t.Cleanup(c.stop)
	return c
}

func (c *cluster) startReplica(opts rlqs.Options, st *failing, server ...grpc.ServerOption) *replica {
	c.t.Helper()
	if st != nil {
		opts.Store = st
	} else {
		st = &failing{} // none: kill's switch off reaches nothing
	}
	svc, err := rlqs.New(opts)
	if err != nil {
		c.t.Fatal(err)
	}
	server = append([]grpc.ServerOption{grpc.ChainStreamInterceptor(c.tally.Interceptor(), c.slow.interceptor())}, server...)
	cc, gs := envoysim.InProcess(c.t, svc.Register, server...)
	return &replica{svc: svc, store: st, gs: gs, cc: cc, sw: envoysim.NewSwitch(c.tally.Dialer(envoysim.GRPCDialer(cc)))}
}

// slowSends delays what the replicas send on the streams of slow Envoys
// (envoyOn's slow) while it is shut: a push the server queued stays on
// its way, as on a congested connection.
type slowSends struct {
	mu   sync.Mutex
	shut chan struct{} // nil: open
}

const slowKey = "x-test-slow"

// hold shuts the way to slow Envoys; let opens it.
func (s *slowSends) hold() {
	s.mu.Lock()
	s.shut = make(chan struct{})
	s.mu.Unlock()
}

func (s *slowSends) let() {
	s.mu.Lock()
	close(s.shut)
	s.shut = nil
	s.mu.Unlock()
}

func (s *slowSends) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if len(metadata.ValueFromIncomingContext(ss.Context(), slowKey)) == 0 {
			return handler(srv, ss)
		}
		return handler(srv, &slowStream{ServerStream: ss, s: s})
	}
}

type slowStream struct {
	grpc.ServerStream
	s *slowSends
}

func (st *slowStream) SendMsg(m any) error {
	st.s.mu.Lock()
	shut := st.s.shut
	st.s.mu.Unlock()
	if shut != nil {
		select {
		case <-shut:
		case <-st.Context().Done():
			return st.Context().Err()
		}
	}
	return st.ServerStream.SendMsg(m)
}

// envoy adds a simulated Envoy whose streams go to replica first (then to
// the next that accepts one).
func (c *cluster) envoy(first int, cfg envoysim.Config) *envoysim.Envoy {
	c.t.Helper()
	order := make([]int, len(c.replicas))
	for i := range c.replicas {
		order[i] = (first + i) % len(c.replicas)
	}
	return c.envoyOn(order, cfg)
}

// envoyOn adds a simulated Envoy whose RLQS cluster holds the replicas
// of order, in that priority, health-checked as the example's are (every
// second, down after two failures).
func (c *cluster) envoyOn(order []int, cfg envoysim.Config) *envoysim.Envoy {
	c.t.Helper()
	if cfg.Domain == "" {
		cfg.Domain = "d"
	}
	if cfg.ReportPeriod == 0 {
		cfg.ReportPeriod = c.period
	}
	dialers := make([]envoysim.Dialer, len(order))
	for i, r := range order {
		dialers[i] = c.replicas[r].sw.Dial
	}
	if c.slowNext {
		c.slowNext = false
		for i, d := range dialers {
			dialers[i] = func(ctx context.Context) (envoysim.Stream, error) {
				return d(metadata.AppendToOutgoingContext(ctx, slowKey, "1"))
			}
		}
	}
	p := envoysim.NewPriorities(c.clock, envoysim.HealthCheck{Interval: time.Second, Unhealthy: 2, Healthy: 1}, dialers...)
	e, err := envoysim.New(cfg, c.clock, p.Dial)
	if err != nil {
		c.t.Fatal(err)
	}
	c.fleet.Add(e)
	c.envoys = append(c.envoys, e)
	c.clusters = append(c.clusters, envoyCluster{p, order})
	return e
}

// envoyCluster is an Envoy's RLQS cluster, and the replica of each of its
// priorities.
type envoyCluster struct {
	p     *envoysim.Priorities
	order []int
}

// down tells every Envoy's cluster that replica i is down (up): its
// health checks find it so two seconds (one) on.
func (c *cluster) down(i int) { c.setDown(i, true) }

func (c *cluster) up(i int) { c.setDown(i, false) }

func (c *cluster) setDown(i int, down bool) {
	for _, ec := range c.clusters {
		for k, r := range ec.order {
			if r == i {
				ec.p.SetDown(k, down)
			}
		}
	}
}

// run advances the fleet by d.
func (c *cluster) run(d time.Duration) { c.fleet.Run(c.clock, d) }

// kill makes a replica die as a crash would: cut off from the store (its
// Envoys' demand stays there until it expires), then its server stopped.
func (c *cluster) kill(i int) {
	r := c.replicas[i]
	r.store.down.Store(true)
	r.gs.Stop()
	_ = r.cc.Close()
	r.dead = true
	c.down(i)
}

// blackHole makes a replica lost without a reset: cut off from the
// store, and from its Envoys, whose streams stay open and silent.
func (c *cluster) blackHole(i int) {
	r := c.replicas[i]
	r.store.down.Store(true)
	r.sw.BlackHole()
	c.down(i)
}

func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, e := range c.envoys {
		e.Close()
	}
	for _, r := range c.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = r.svc.Close(ctx) // a dead one's too: its watch of notices ends
			if !r.dead {
				r.gs.Stop()
				_ = r.cc.Close()
			}
		}()
	}
	wg.Wait()
}

// admitted measures each traffic's admitted rate over d: the requests its
// Envoy allowed in its bucket, per second.
func (c *cluster) admitted(d time.Duration, ts ...*envoysim.Traffic) []float64 {
	before := make([]envoysim.Counts, len(ts))
	for i, tr := range ts {
		before[i] = tr.Envoy.Counts(tr.Bucket)
	}
	c.run(d)
	out := make([]float64, len(ts))
	for i, tr := range ts {
		out[i] = float64(tr.Envoy.Counts(tr.Bucket).Allowed-before[i].Allowed) / d.Seconds()
	}
	return out
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

// checkClean fails t if the server broke a protocol rule, left a report
// unanswered, or let an assigned bucket fall back to no_assignment.
func (c *cluster) checkClean() {
	c.t.Helper()
	if v := c.fleet.Violations(); v.Total() != 0 {
		c.t.Errorf("protocol violations: %v", v)
	}
	if c.fleet.Unanswered != 0 {
		c.t.Errorf("%d reports unanswered", c.fleet.Unanswered)
	}
	for i, e := range c.envoys {
		if st := e.Stats(); st.GapDecisions != 0 || st.Expired != 0 {
			c.t.Errorf("envoy %d: %d requests decided after an assignment lapsed (%d expiries)", i, st.GapDecisions, st.Expired)
		}
	}
}
