package rlqs

import (
	"context"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inbox is a stream's report waiting to be handled: the reports that came
// while it waited for a worker (Options.ReportWorkers) are merged into
// it, their counts added, so that a stream's waiting work is one report
// whatever it sends (docs/rlqs.md, "RLQS and RLS on one replica"). A
// report that would make the waiting one name more buckets than
// mergeMax allows is not merged: the reader waits until the waiting
// report is taken, so that a stream naming new buckets report after
// report holds at most one report's worth in waiting, not all of them.
// The stream's reader offers, its handler takes.
type inbox struct {
	pending *rlqspb.RateLimitQuotaUsageReports
	first   int            // the buckets pending named when it came
	index   map[string]int // pending's usages, by canonical bucket id
	domain  string         // of the stream's first report (the reader's)
	ready   chan struct{}  // signalled when a report is pending
	taken   chan struct{}  // signalled when the pending report is taken
}

// mergeMin is how many buckets a waiting report may grow to by merging
// whatever it started as: an Envoy's subscriptions (a new bucket each)
// merge into a waiting report.
const mergeMin = 1024

// mergeMax is the most buckets a waiting report that came naming first
// may name by merging.
func mergeMax(first int) int { return max(first, mergeMin) }

// offer takes a report from the stream's reader: pending, or merged into
// the pending one (counted shed), or, if it would grow the pending one
// past mergeMax, pending once the pending one is taken (the reader waits
// meanwhile, until ctx ends). A report of another domain ends the
// stream, as handle would.
func (st *stream) offer(ctx context.Context, m *rlqspb.RateLimitQuotaUsageReports) error {
	s := st.svc
	in := &st.in
	st.mu.Lock()
	switch d := m.GetDomain(); {
	case in.domain == "":
		in.domain = d
	case d != "" && d != in.domain:
		st.mu.Unlock()
		return status.Errorf(codes.InvalidArgument, "usage report for domain %q on a stream of domain %q; open a stream per domain",
			d, in.domain)
	}
	st.lastReport = s.opts.Clock.Now() // not silent while its reader waits
	for in.pending != nil && !in.merge(m) {
		st.mu.Unlock()
		select {
		case <-in.taken:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		st.mu.Lock()
	}
	st.lastReport = s.opts.Clock.Now() // not silent, whenever it is handled
	merged := in.pending != nil
	if !merged {
		in.pending, in.index, in.first = m, nil, len(m.GetBucketQuotaUsages())
		s.inHand.Add(1)
	}
	st.mu.Unlock()
	if merged {
		s.obs.ReportsShed(s.label(in.domain), 1)
	}
	select {
	case in.ready <- struct{}{}:
	default:
	}
	return nil
}

// merge adds m's usages to the pending report: the counts of a bucket it
// names already, the others as they are, and reports true; or, if the
// pending report would then name more buckets than mergeMax, leaves it
// as it is and reports false. A bucket keeps the time_elapsed of its
// first usage (its first naming on the stream, if it is one). st.mu is
// held.
func (in *inbox) merge(m *rlqspb.RateLimitQuotaUsageReports) bool {
	if in.index == nil {
		in.index = make(map[string]int, len(in.pending.BucketQuotaUsages))
		for i, u := range in.pending.BucketQuotaUsages {
			_, text := canonical(u.GetBucketId().GetBucket())
			in.index[text] = i
		}
	}
	keys := make([]string, len(m.GetBucketQuotaUsages()))
	fresh := 0
	for j, u := range m.GetBucketQuotaUsages() {
		_, keys[j] = canonical(u.GetBucketId().GetBucket())
		if _, ok := in.index[keys[j]]; !ok {
			fresh++
		}
	}
	if len(in.pending.BucketQuotaUsages)+fresh > mergeMax(in.first) {
		return false
	}
	for j, u := range m.GetBucketQuotaUsages() {
		text := keys[j]
		i, ok := in.index[text]
		if !ok {
			in.index[text] = len(in.pending.BucketQuotaUsages)
			in.pending.BucketQuotaUsages = append(in.pending.BucketQuotaUsages, u)
			continue
		}
		p := in.pending.BucketQuotaUsages[i]
		p.NumRequestsAllowed += u.GetNumRequestsAllowed()
		p.NumRequestsDenied += u.GetNumRequestsDenied()
	}
	return true
}

// pendingReport reports whether a report waits.
func (st *stream) pendingReport() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.in.pending != nil
}

// take takes the waiting report, nil if none; its count in inHand stays
// until it is handled (handleNext).
func (st *stream) take() *rlqspb.RateLimitQuotaUsageReports {
	st.mu.Lock()
	defer st.mu.Unlock()
	m := st.in.pending
	st.in.pending, st.in.index = nil, nil
	if m != nil {
		select {
		case st.in.taken <- struct{}{}:
		default:
		}
	}
	return m
}
