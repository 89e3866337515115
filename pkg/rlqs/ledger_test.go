package rlqs_test

import (
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// TestAbandonFreesRoom: a bucket dropped for going unnamed for three
// periods gives its room back: with --rlqs-max-buckets 2 full, a new
// bucket is held once one is dropped.
func TestAbandonFreesRoom(t *testing.T) {
	c := newCluster(t, clusterOptions{opts: func(o *rlqs.Options) { o.MaxBuckets = 2 }})
	s := openRaw(t, c)
	a := answers(s)
	if err := s.Send(named("x0", "x1")); err != nil {
		t.Fatal(err)
	}
	expect(t, a, "x0", "x1")
	// x1 named every period, x0 no more: dropped (abandoned) at the third.
	for i := range 3 {
		c.clock.Advance(c.period)
		if err := s.Send(named("x1")); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			expect(t, a, "x1")
		} else {
			expect(t, a, "x1", "x0") // and x0's abandon_action
		}
	}
	if err := s.Send(named("x1", "x2")); err != nil {
		t.Fatal(err)
	}
	expect(t, a, "x1", "x2")
	if n := c.replicas[0].svc.Totals()["d"].Buckets; n != 2 {
		t.Errorf("%d buckets held, want 2", n)
	}
}

// TestRaiseWaitsForCuts: without a demand store, a replica grants a new
// Envoy a rate only from what no Envoy holds, a cut counting at its old
// rate until it has been sent: while the cut of the Envoy holding the
// whole limit is on its way (its connection slow), the new one gets only
// the slack, and the ledger never holds more than the limit and the
// slack of settling.
func TestRaiseWaitsForCuts(t *testing.T) {
	c := newCluster(t, clusterOptions{noStore: true})
	c.slowNext = true
	e0 := c.envoy(0, envoysim.Config{})
	c.fleet.Send(e0, bucketA, 600)
	c.run(2 * c.period)
	if h := e0.Held(bucketA); h != 300 {
		t.Fatalf("the first Envoy holds %v, want the limit (300)", h)
	}
	c.slow.hold()
	e1 := c.envoy(0, envoysim.Config{})
	e1.Request(bucketA) // its subscription: the server cuts e0, which does not hear of it yet
	if !e1.Await(10 * time.Second) {
		t.Fatal("the new Envoy's subscription was not answered")
	}
	cfg := quota.Config{}.WithDefaults()
	capacity := 300 * (1 + cfg.Slack())
	held := 0.0
	for _, cl := range c.replicas[0].svc.Usage("d", bucketA).Clients {
		held += *cl.AssignedRate
	}
	if held > capacity+1e-9 {
		t.Errorf("the ledger holds %.1f/s while the cut is on its way, over the limit and slack (%.1f)", held, capacity)
	}
	if h := e1.Held(bucketA); h > capacity-300+1e-9 {
		t.Errorf("the new Envoy holds %.1f/s while the cut that pays for it is on its way", h)
	}
	c.slow.let()
	c.fleet.Send(e1, bucketA, 600)
	c.run(2 * c.period)
	if h0, h1 := e0.Held(bucketA), e1.Held(bucketA); h0 != 150 || h1 != 150 {
		t.Errorf("once the cut is sent they hold %v and %v, want 150 each", h0, h1)
	}
	c.checkClean()
}
