package rlqs

import (
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// TestReadsInOrder: an answer to a read of the store that was issued
// before one already recorded changes nothing. Two reports of one
// replica read a division at once; the later read saw another Envoy's
// adoption (the old value Left), the earlier came back last and counted
// the old value beside its adopter again: TestFailoverLateTimer's
// replaced buckets, about 1 run in 300 beside a busy loop.
func TestReadsInOrder(t *testing.T) {
	l := quota.Limit{Rate: 300, Burst: 300}
	dv := &division{q: quota.NewBucket(l), buckets: map[string]*envoyBucket{}}
	now := time.Unix(0, 0)
	before := []quota.Demand{{Replica: "r0", Client: "old", Rate: 100, Assigned: 100}}
	after := []quota.Demand{{Replica: "r0", Client: "old", Rate: quota.Left, Assigned: 0}}
	early, late := dv.readTicket(), dv.readTicket()
	dv.setRemote("r1", after, now, late)
	dv.setRemote("r1", before, now, early)
	if remote, _ := dv.q.Remote(); len(remote) != 0 {
		t.Errorf("remote %+v after the earlier read's answer came last, want none (the later read's)", remote)
	}
}

// TestJoinHeldOut: a new client that may have moved joins its division
// held out, in the same step: a settle between its join and its hold
// counted it beside its old value (and granted it a raise).
func TestJoinHeldOut(t *testing.T) {
	l := quota.Limit{Rate: 300, Burst: 300}
	dv := &division{q: quota.NewBucket(l), buckets: map[string]*envoyBucket{}}
	b := &envoyBucket{client: "c"}
	dv.join(b, l, time.Unix(0, 0), true)
	if c := dv.q.Client("c"); !c.Hold || !b.crediting {
		t.Errorf("joined with Hold %v, crediting %v; want both", c.Hold, b.crediting)
	}
}
