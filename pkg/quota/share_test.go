package quota_test

import (
	"math"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

var t0 = time.Unix(1_000_000, 0)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// TestObserve: the rate is measured on the server's clock; a subscription
// leaves it unknown; a rise is taken at once, a fall smoothed; reports too
// close together are carried into the next.
func TestObserve(t *testing.T) {
	cfg := quota.Config{}.WithDefaults()
	var c quota.Client
	c.Observe(1, 0, t0, &cfg)
	if c.Known {
		t.Fatal("a subscription made the demand known")
	}
	c.Observe(500, 5*time.Second, t0.Add(5*time.Second), &cfg)
	if !c.Known || c.Demand != 100 {
		t.Fatalf("demand = %v (%v), want 100", c.Demand, c.Known)
	}
	c.Observe(5000, 5*time.Second, t0.Add(10*time.Second), &cfg)
	if c.Demand != 1000 {
		t.Fatalf("rise: demand = %v, want 1000 at once", c.Demand)
	}
	c.Observe(0, 5*time.Second, t0.Add(15*time.Second), &cfg)
	// One time constant: 1000 * e^-1.
	if !near(c.Demand, 1000*math.Exp(-1), 0.01) {
		t.Fatalf("fall: demand = %v, want %v", c.Demand, 1000*math.Exp(-1))
	}
	c.Observe(100, 0, t0.Add(15500*time.Millisecond), &cfg) // too close: carried
	c.Observe(400, 4*time.Second, t0.Add(20*time.Second), &cfg)
	if c.Demand < 100 || c.LastReport != t0.Add(20*time.Second) {
		t.Fatalf("carried report: demand = %v", c.Demand)
	}
	if c.Idle(t0.Add(25*time.Second), 6*time.Second) || !c.Idle(t0.Add(27*time.Second), 6*time.Second) {
		t.Error("Idle does not count from the last active report")
	}
	var r quota.Client
	r.Observe(250, 5*time.Second, t0, &cfg) // first report on a reopened stream
	if !r.Known || r.Demand != 50 {
		t.Errorf("reopened: demand = %v, want 50 from time_elapsed", r.Demand)
	}
	// A fall below what the client holds (its share unused) is taken at
	// once; one that stays above it is smoothed.
	w := quota.Client{Assigned: 75}
	w.Observe(0, 0, t0, &cfg)
	w.Observe(3000, 0, t0.Add(5*time.Second), &cfg)
	if !w.Wants() {
		t.Error("a client asking 600/s of the 75 it holds does not want more")
	}
	w.Observe(1000, 0, t0.Add(10*time.Second), &cfg)
	if w.Demand <= 200 {
		t.Errorf("a fall to 200/s, above the 75 held: demand = %v, want it smoothed", w.Demand)
	}
	w.Observe(5, 0, t0.Add(15*time.Second), &cfg)
	if w.Demand != 1 || w.Wants() {
		t.Errorf("a fall to 1/s, below the 75 held: demand = %v, want 1 at once", w.Demand)
	}
}

// TestReport: denied requests count as demand only as far as the client
// used what it held (docs/rlqs.md, "Earned demand").
func TestReport(t *testing.T) {
	cfg := quota.Config{}.WithDefaults()
	for _, tc := range []struct {
		name            string
		held            float64
		allowed, denied uint64 // over 5s
		want            float64
	}{
		{"used all, denied more: all of it", 20, 100, 900, 200},
		{"used half: all of it", 20, 50, 900, 190},
		{"used none, denied: the probe", 20, 0, 10000, 1},
		{"used a fifth, denied: use and probe", 20, 20, 10000, 5},
		{"used none, denied none", 20, 0, 0, 0},
		{"holds nothing yet: all of it", 0, 0, 500, 100},
		{"denied a little, under the probe", 20, 0, 2, 0.4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := quota.Client{Assigned: tc.held}
			c.Report(0, 0, 0, t0, &cfg)
			c.Report(tc.allowed, tc.denied, 0, t0.Add(5*time.Second), &cfg)
			if !near(c.Demand, tc.want, 1e-9) {
				t.Errorf("demand = %v, want %v", c.Demand, tc.want)
			}
		})
	}
	// What it held is the least of now and the last report: a raise after
	// that report does not make the client owe its use.
	c := quota.Client{Assigned: 10}
	c.Report(0, 0, 0, t0, &cfg)
	c.Report(50, 500, 0, t0.Add(5*time.Second), &cfg)
	c.Assigned = 200
	c.Report(60, 2000, 0, t0.Add(10*time.Second), &cfg)
	if c.Demand != 412 {
		t.Errorf("raised client: demand = %v, want 412 (it used all of the 10 it held)", c.Demand)
	}
	// Raised between its subscription (holding nothing) and its first
	// report: that report is all demand.
	c = quota.Client{}
	c.Report(1, 0, 0, t0, &cfg)
	c.Assigned = 33
	c.Report(60, 189, 0, t0.Add(5*time.Second), &cfg)
	if !near(c.Demand, 49.8, 1e-9) {
		t.Errorf("raised after its subscription: demand = %v, want 49.8", c.Demand)
	}
}

// TestStepped: a client held to 33/s while it asks 150/s reports a period
// in which its demand stepped down (or did not): the step's time and new
// rate follow from the counts (docs/rlqs.md, "A shift between two
// reports").
func TestStepped(t *testing.T) {
	cfg := quota.Config{}.WithDefaults()
	const held, demand = 33.0, 150.0
	for _, tc := range []struct {
		name string
		// a step at fraction f of the 5 s interval to rate x (x = demand:
		// no step)
		f, x float64
		want float64
	}{
		{"no step: constrained throughout", 1, demand, demand},
		{"down to 5/s at 0.6", 0.6, 5, 5},
		{"down to 5/s at 0.3", 0.3, 5, 5},
		{"down to 20/s at 0.8", 0.8, 20, 20},
		{"down to 0 at 0.1", 0.1, 0, 0},
		// Still over what it held: no step shows; the mean fall is
		// followed smoothly, from 150 towards 125.
		{"down to 100/s, still over what it held", 0.5, 100, 134.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := quota.Client{Assigned: held}
			c.Report(0, 0, 0, t0, &cfg)
			c.Report(uint64(5*held), uint64(5*(demand-held)), 0, t0.Add(5*time.Second), &cfg)
			if c.Demand != demand {
				t.Fatalf("demand = %v before the step, want %v", c.Demand, demand)
			}
			allowed := held*tc.f + min(tc.x, held)*(1-tc.f)
			denied := (demand-held)*tc.f + max(tc.x-held, 0)*(1-tc.f)
			c.Report(uint64(5*allowed+0.5), uint64(5*denied+0.5), 0, t0.Add(10*time.Second), &cfg)
			if !near(c.Demand, tc.want, 0.5) {
				t.Errorf("demand = %v after the period, want %v", c.Demand, tc.want)
			}
		})
	}
}

// TestSteppedLate: Envoy's counts cover its 5 s period however late the
// server takes them; a report taken later than the last one stretches the
// interval on the server's clock, which scales both counts down alike.
// A client denied throughout must not read as a step down to nothing at
// the interval's end (it was cut to the floor for a period: e2e
// TestEnvoyRLQS, one Envoy held to 2-8/s where its share was 39-50/s,
// its report answered 0.9-1.3 s late), and a real step still reads as
// itself.
func TestSteppedLate(t *testing.T) {
	cfg := quota.Config{}.WithDefaults()
	for _, tc := range []struct {
		name string
		// the demand and what it held, a step at fraction f of Envoy's
		// 5 s period to rate x (f = 1: no step), and how late the report
		// is taken beyond the last one's lateness
		demand, held, f, x float64
		late               time.Duration
		want               float64
	}{
		{"150 held to 39, no step, 0.3 s late", 150, 39, 1, 150, 300 * time.Millisecond, 150},
		{"150 held to 39, no step, 1.3 s late", 150, 39, 1, 150, 1300 * time.Millisecond, 150},
		{"50 held to 39, no step, 0.9 s late", 50, 39, 1, 50, 900 * time.Millisecond, 50},
		{"150 held to 39, no step, the last one 1 s late", 150, 39, 1, 150, -time.Second, 150},
		{"150 held to 33, down to 5/s at 0.6, 1 s late", 150, 33, 0.6, 5, time.Second, 5},
		{"150 held to 33, down to 5/s at 0.6, on time", 150, 33, 0.6, 5, 0, 5},
		{"150 held to 33, down to 20/s at 0.8, 0.5 s late", 150, 33, 0.8, 20, 500 * time.Millisecond, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := quota.Client{Assigned: tc.held}
			c.Report(0, 0, 0, t0, &cfg)
			c.Report(uint64(5*tc.held), uint64(5*(tc.demand-tc.held)), 0, t0.Add(5*time.Second), &cfg)
			allowed := tc.held*tc.f + min(tc.x, tc.held)*(1-tc.f)
			denied := (tc.demand-tc.held)*tc.f + max(tc.x-tc.held, 0)*(1-tc.f)
			c.Report(uint64(5*allowed+0.5), uint64(5*denied+0.5), 0, t0.Add(10*time.Second+tc.late), &cfg)
			// A late report's rates are read over the longer interval;
			// only the step is read over the period.
			scale := 5 / (5 + tc.late.Seconds())
			if tc.f == 1 {
				if !near(c.Demand, tc.want, tc.want*math.Abs(scale-1)+0.5) {
					t.Errorf("demand = %v after the period, want about %v (no step)", c.Demand, tc.want)
				}
				return
			}
			if !near(c.Demand, tc.want, 0.5) {
				t.Errorf("demand = %v after the period, want %v", c.Demand, tc.want)
			}
		})
	}
}

// TestRemoteHeld: what other replicas' Envoys hold is summed, clients that
// left included, though they count toward no division; Split divides this
// replica's part.
func TestRemoteHeld(t *testing.T) {
	cfg := quota.Config{}.WithDefaults()
	b := quota.NewBucket(quota.Limit{Rate: 300, Burst: 300})
	known(b, "a", 800)
	if !b.SetRemote("r1", []quota.Demand{
		{Replica: "r1", Client: "a", Rate: 800, Assigned: 150},
		{Replica: "r2", Client: "c", Rate: 100, Assigned: 100},
		{Replica: "r2", Client: "gone", Rate: quota.Left, Assigned: 50},
	}, t0) {
		t.Fatal("a first read changed nothing")
	}
	if got := b.RemoteHeld(); got != 150 {
		t.Errorf("remote held %v, want 150 (the left one's included)", got)
	}
	if b.Count(quota.Global) != 2 || b.Count(quota.Split) != 1 || b.Capacity(quota.Split) != 150 {
		t.Errorf("count %d/%d, split capacity %v", b.Count(quota.Global), b.Count(quota.Split), b.Capacity(quota.Split))
	}
	if !b.SetRemote("r1", []quota.Demand{{Replica: "r2", Client: "c", Rate: 100, Assigned: 100}}, t0) {
		t.Error("a fall of what others hold changed nothing")
	}
	if got := shares(b, quota.Global, &cfg); got["a"] != 190 {
		t.Errorf("shares %v, want a 190 (c wants 110)", got)
	}
	if eps := cfg.Slack(); eps < 0.0204 || eps > 0.0205 {
		t.Errorf("slack %v, want 0.02/0.98", eps)
	}
}

func shares(b *quota.Bucket, mode quota.Mode, cfg *quota.Config) map[string]float64 {
	m := map[string]float64{}
	b.Shares(mode, cfg, func(c *quota.Client, s float64) { m[c.ID] = s })
	return m
}

func known(b *quota.Bucket, id string, demand float64) {
	c := b.Join(id, t0)
	c.Demand, c.Known = demand, true
}

func TestShares(t *testing.T) {
	cfg := quota.Config{}.WithDefaults()
	b := quota.NewBucket(quota.Limit{Rate: 300, Burst: 300})
	known(b, "a", 800)
	known(b, "b", 100)
	b.SetRemote("r1", []quota.Demand{
		{Replica: "r1", Client: "a", Rate: 800}, // this replica's own: ignored
		{Replica: "r2", Client: "c", Rate: 100},
	}, t0)
	got := shares(b, quota.Global, &cfg)
	if len(got) != 2 || !near(got["a"], 100, 1e-9) || !near(got["b"], 100, 1e-9) {
		t.Fatalf("global shares = %v, want 100 each", got)
	}
	if b.Replicas() != 2 {
		t.Fatalf("replicas = %d", b.Replicas())
	}
	// Split: 150 for this replica, a wants 880, b 110.
	got = shares(b, quota.Split, &cfg)
	if !near(got["a"], 75, 1e-9) || !near(got["b"], 75, 1e-9) {
		t.Fatalf("split shares = %v, want 75 each", got)
	}
	// Demand falls: b's want (55) and c's (110) are met, a gets the rest.
	b.Client("b").Demand = 50
	got = shares(b, quota.Global, &cfg)
	if !near(got["b"], 55, 1e-9) || !near(got["a"], 135, 1e-9) {
		t.Fatalf("shares = %v, want b 55, a 135", got)
	}
	// A new client wants the even split until it reports.
	b.Join("n", t0)
	got = shares(b, quota.Global, &cfg)
	if !near(got["n"], 75, 1e-9) {
		t.Fatalf("new client's share = %v, want 75 (300/4)", got["n"])
	}
	// An idle client wants MinWant of the even split.
	b.Leave("n")
	b.Client("b").Demand = 0
	got = shares(b, quota.Global, &cfg)
	if !near(got["b"], 5, 1e-9) {
		t.Fatalf("idle share = %v, want 5", got["b"])
	}
}

func TestSettle(t *testing.T) {
	cfg := quota.Config{}.WithDefaults()
	for _, tc := range []struct{ assigned, share, want float64 }{
		{0, 100, 100},
		{100, 104, 100},
		{100, 106, 106},
		{100, 98.5, 100},
		{100, 97, 97},
		{100, 0, 0},
	} {
		if got := quota.Settle(tc.assigned, tc.share, &cfg); got != tc.want {
			t.Errorf("Settle(%v, %v) = %v, want %v", tc.assigned, tc.share, got, tc.want)
		}
	}
}

// TestGroups: the limit is divided among groups, then within each: three
// clients of one Envoy identity count as one client. c wants 11 (10 and
// headroom); groups a and b share the other 79.
func TestGroups(t *testing.T) {
	cfg := quota.Config{}.WithDefaults()
	b := quota.NewBucket(quota.Limit{Rate: 90, Burst: 90})
	for _, id := range []string{"a|1", "a|2", "a|3", "b|1"} {
		known(b, id, 100)
	}
	known(b, "c", 10) // no group: its own
	got := shares(b, quota.Global, &cfg)
	for id, want := range map[string]float64{"a|1": 79.0 / 6, "a|2": 79.0 / 6, "a|3": 79.0 / 6, "b|1": 39.5, "c": 11} {
		if !near(got[id], want, 1e-9) {
			t.Errorf("%s: share %v, want %v (all %v)", id, got[id], want, got)
		}
	}
	if g := quota.IdentityOf("a|b|c"); g != "a" {
		t.Errorf("IdentityOf = %q", g)
	}
}
