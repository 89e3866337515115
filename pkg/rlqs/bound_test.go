package rlqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// TestOverAdmissionBound checks the bound docs/rlqs.md states ("How far
// over the limit", point 3), over a run of two replicas with every kind of
// change: demand shifts, an Envoy joining, one leaving, a replica dying.
// With C the limit (300/s), B its burst (300), N the Envoys and eps =
// Lower/(1-Lower) (settled shares stay up to 2.04% above due), the
// requests admitted in any window of W seconds, through the changes too,
// are at most
//
//	C(1+eps)W + B(1+eps) + N + K·(B+1)
//
// K being the token buckets replaced within the window when Envoy starts a
// replaced bucket full (0 when it starts it partial, as Envoy 1.40 does),
// plus the requests decided by no_assignment_behavior (ALLOW_ALL) in the
// window: a new bucket's until its first answer comes (the Envoys here
// apply answers 20 ms after they arrive, and create a bucket 5 ms after a
// worker meets it).
//
// Both readings of Envoy's replaced bucket run (docs/rlqs.md).
func TestOverAdmissionBound(t *testing.T) {
	for _, mode := range []envoysim.Replace{envoysim.ReplacePartial, envoysim.ReplaceFullOrEmpty} {
		t.Run(fmt.Sprintf("replace %d", mode), func(t *testing.T) {
			checkBound(t, mode == envoysim.ReplaceFullOrEmpty)
		})
	}
}

// change is a scenario step: at a time, something happens.
type change struct {
	at time.Duration
	do func()
}

func checkBound(t *testing.T, full bool) {
	const (
		period = 5 * time.Second
		c      = 300.0
		b      = 300.0
		window = 2 * period
	)
	cfg := quota.Config{}.WithDefaults()
	eps := cfg.Lower / (1 - cfg.Lower)
	cl := newCluster(t, clusterOptions{period: period, replicas: 2})
	ecfg := envoysim.Config{Replace: envoysim.ReplacePartial, Latency: 20 * time.Millisecond, CreateGap: 5 * time.Millisecond}
	if full {
		ecfg.Replace = envoysim.ReplaceFullOrEmpty
	}
	e0, e1, e2 := cl.envoy(0, ecfg), cl.envoy(1, ecfg), cl.envoy(0, ecfg)
	ts := []*envoysim.Traffic{cl.fleet.Send(e0, bucketA, 800), cl.fleet.Send(e1, bucketA, 100), cl.fleet.Send(e2, bucketA, 100)}
	steps := []change{
		{0, func() {}},
		{50 * time.Second, func() { ts[0].SetRate(50) }},
		{100 * time.Second, func() {
			ts = append(ts, cl.fleet.Send(cl.envoy(1, ecfg), bucketA, 500))
		}},
		{150 * time.Second, func() { cl.fleet.Remove(e1); ts[1].SetRate(0) }},
		{200 * time.Second, func() { cl.kill(0) }},
		{300 * time.Second, func() { ts[2].SetRate(400) }},
	}
	const end = 400 * time.Second
	// Admitted requests per period slot, replaced buckets and requests
	// decided by default per slot.
	var slots []float64
	var replaced, byDefault []int
	lastDefault := 0
	last := map[*envoysim.Traffic]uint64{}
	lastReplaced := 0
	next := 0
	for at := time.Duration(0); at < end; at += period {
		for next < len(steps) && steps[next].at <= at {
			steps[next].do()
			next++
		}
		cl.run(period)
		n := 0.0
		for _, tr := range ts {
			a := tr.Envoy.Counts(tr.Bucket).Allowed
			n += float64(a - last[tr])
			last[tr] = a
		}
		slots = append(slots, n)
		r := 0
		for _, e := range cl.envoys {
			r += e.Stats().ReplacedBuckets
		}
		replaced = append(replaced, r-lastReplaced)
		lastReplaced = r
		d := 0
		for _, e := range cl.envoys {
			d += e.Stats().DecidedByDefault
		}
		byDefault = append(byDefault, d-lastDefault)
		lastDefault = d
	}
	per := int(window / period)
	nEnvoys := float64(len(cl.envoys))
	worst := 0.0
	for s := 0; s+per <= len(slots); s++ {
		admitted, k, d := 0.0, 0, 0
		for j := s; j < s+per; j++ {
			admitted += slots[j]
			k += replaced[j]
			d += byDefault[j]
		}
		bound := c*(1+eps)*window.Seconds() + b*(1+eps) + nEnvoys + float64(d)
		if full {
			bound += float64(k) * (b + 1)
		}
		if admitted > bound {
			t.Errorf("window at %v: admitted %.0f > %.0f", time.Duration(s)*period, admitted, bound)
		}
		worst = max(worst, admitted/bound)
	}
	t.Logf("worst window: %.0f%% of the bound", 100*worst)
	cl.checkClean()
}
