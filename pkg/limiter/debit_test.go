package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// recording is a Store that keeps the ops it was asked to take.
type recording struct {
	limiter.AtomicStore
	ops []limiter.Op
}

func (r *recording) Take(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	r.ops = append(r.ops, ops...)
	return r.AtomicStore.Take(ctx, ops, results)
}

func (r *recording) TakeAll(ctx context.Context, ops []limiter.Op, results []limiter.Result) error {
	r.ops = append(r.ops, ops...)
	return r.AtomicStore.TakeAll(ctx, ops, results)
}

// TestChargeAlways: a limit's charge: always (descriptors.ChargeAlways)
// makes its ops debits (limiter.Op.Debit), and its calendar their
// Calendar; a 100,000-token daily budget charged 99,500 tokens, then a
// response's 40,000, refuses the next request, in a plain and an atomic
// domain, alone and as one of several limits.
func TestChargeAlways(t *testing.T) {
	budget := func(alg descriptors.Algorithm) *descriptors.Limit {
		return &descriptors.Limit{Unit: descriptors.Day, RequestsPerUnit: 100_000, Algorithm: alg, Charge: descriptors.ChargeAlways}
	}
	calendar := budget(descriptors.FixedWindow)
	calendar.Unit, calendar.Calendar = descriptors.Month, "Europe/Berlin"
	rules := []descriptors.Descriptor{
		{Key: "fixed", Limit: budget(descriptors.FixedWindow)},
		{Key: "sliding", Limit: budget(descriptors.SlidingWindow)},
		{Key: "bucket", Limit: budget(descriptors.TokenBucket)},
		{Key: "calendar", Limit: calendar},
		{Key: "several", Limits: []*descriptors.Limit{budget(descriptors.SlidingWindow),
			{Unit: descriptors.Hour, RequestsPerUnit: 1_000_000, Algorithm: descriptors.TokenBucket, Charge: descriptors.ChargeAlways}}},
	}
	set := mustSet(t, descriptors.DomainConfig{Name: "plain", Descriptors: rules},
		descriptors.DomainConfig{Name: "all", Atomic: true, Descriptors: rules})
	for _, domain := range []string{"plain", "all"} {
		for _, key := range []string{"fixed", "sliding", "bucket", "calendar", "several"} {
			now := atomicNow
			m := store.NewMemory(store.MemoryOptions{Now: func() time.Time { return now }})
			rec := &recording{AtomicStore: m}
			l := limiter.New(rec, limiter.Options{})
			l.SetRules(set)
			for i, step := range []struct {
				hits uint64
				want limiter.Code
			}{{99_500, limiter.OK}, {40_000, limiter.OverLimit}, {1, limiter.OverLimit}} {
				resp := check(t, l, hits(req(domain, key), 0, step.hits))
				if st := resp.Statuses[0]; st.Code != step.want || step.want == limiter.OverLimit && st.RetryAfterMillis <= 0 {
					t.Errorf("%s %s: step %d (%d hits) = %v %+v, want %v", domain, key, i, step.hits, st.Code, st, step.want)
				}
				now = now.Add(time.Second)
			}
			for _, op := range rec.ops {
				if !op.Debit || (op.Calendar != nil) != (key == "calendar") {
					t.Errorf("%s %s: op %+v, want Debit and a calendar only for the calendar's", domain, key, op)
				}
			}
			if key == "calendar" && rec.ops[0].Calendar.Zone() != "Europe/Berlin" {
				t.Errorf("%s: calendar %s", key, rec.ops[0].Calendar.Zone())
			}
		}
	}
}
