package rlqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/pkg/quota"
)

// TestOverAdmissionBound checks the bound docs/rlqs.md states, over a run
// of two replicas with every kind of change: demand shifts, an Envoy
// joining, one leaving, a replica dying. With C the limit (300/s), B its
// burst (300), N the Envoys, R the replicas, P the report period and
// eps = Lower/(1-Lower) (settled shares stay up to 2.04% above due), the
// requests admitted in any window of W seconds are at most
//
//	C(1+eps)W + B(1+eps) + N                   once 2P have passed since
//	                                           the last change of demand or
//	                                           membership (TTL + 3P after a
//	                                           replica dies),
//	R·C(1+eps)W + R·B(1+eps) + N + K·(B+1)      always, K being the token
//	                                           buckets replaced within the
//	                                           window when Envoy starts a
//	                                           replaced bucket full.
//
// Both readings of Envoy's replaced bucket run (docs/rlqs.md).
func TestOverAdmissionBound(t *testing.T) {
	for _, mode := range []envoysim.Replace{envoysim.ReplacePartial, envoysim.ReplaceFullOrEmpty} {
		t.Run(fmt.Sprintf("replace %d", mode), func(t *testing.T) {
			checkBound(t, mode == envoysim.ReplaceFullOrEmpty)
		})
	}
}

// change is a scenario step: at a time, something happens, and the
// division needs settle to be consistent again.
type change struct {
	at     time.Duration
	settle time.Duration
	do     func()
}

func checkBound(t *testing.T, full bool) {
	const (
		period = time.Second
		c      = 300.0
		b      = 300.0
		window = 2 * period
	)
	cfg := quota.Config{}.WithDefaults()
	eps := cfg.Lower / (1 - cfg.Lower)
	cl := newCluster(t, clusterOptions{period: period, replicas: 2})
	ecfg := envoysim.Config{Replace: envoysim.ReplacePartial}
	if full {
		ecfg.Replace = envoysim.ReplaceFullOrEmpty
	}
	e0, e1, e2 := cl.envoy(0, ecfg), cl.envoy(1, ecfg), cl.envoy(0, ecfg)
	ts := []*envoysim.Traffic{cl.fleet.Send(e0, bucketA, 800), cl.fleet.Send(e1, bucketA, 100), cl.fleet.Send(e2, bucketA, 100)}
	ttl := 3 * period
	steps := []change{
		{0, 2 * period, func() {}},
		{10 * time.Second, 2 * period, func() { ts[0].SetRate(50) }},
		{20 * time.Second, 2 * period, func() {
			ts = append(ts, cl.fleet.Send(cl.envoy(1, ecfg), bucketA, 500))
		}},
		{30 * time.Second, 2 * period, func() { cl.fleet.Remove(e1); ts[1].SetRate(0) }},
		{40 * time.Second, ttl + 3*period, func() { cl.kill(0) }},
		{60 * time.Second, 2 * period, func() { ts[2].SetRate(400) }},
	}
	const end = 80 * time.Second
	// Admitted requests per period slot, and replaced buckets per slot.
	var slots []float64
	var replaced []int
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
	}
	per := int(window / period)
	nEnvoys := float64(len(cl.envoys))
	worstSteady, worstAny := 0.0, 0.0
	for s := 0; s+per <= len(slots); s++ {
		admitted, k := 0.0, 0
		for j := s; j < s+per; j++ {
			admitted += slots[j]
			k += replaced[j]
		}
		start := time.Duration(s) * period
		steady := c*(1+eps)*window.Seconds() + b*(1+eps) + nEnvoys
		any := 2*c*(1+eps)*window.Seconds() + 2*b*(1+eps) + nEnvoys
		if full {
			any += float64(k) * (b + 1)
		}
		if admitted > any {
			t.Errorf("window at %v: admitted %.0f > %.0f (any time)", start, admitted, any)
		}
		worstAny = max(worstAny, admitted/any)
		if settled(steps, start, start+window) {
			if admitted > steady {
				t.Errorf("window at %v: admitted %.0f > %.0f (steady)", start, admitted, steady)
			}
			worstSteady = max(worstSteady, admitted/steady)
		}
	}
	t.Logf("worst window: %.0f%% of the steady bound, %.0f%% of the general one", 100*worstSteady, 100*worstAny)
	cl.checkClean()
}

// settled reports whether no change's settling time overlaps [from, to).
func settled(steps []change, from, to time.Duration) bool {
	for _, s := range steps {
		if s.at < to && from < s.at+s.settle {
			return false
		}
	}
	return true
}
