package rlqs

import (
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// UnknownDomain stands for every domain the rules do not name, to
// Observers and in Totals, so that Envoys cannot grow label sets.
const UnknownDomain = "_unknown"

// Observer is told of the service's events, for metrics; domain is the
// report's domain, or UnknownDomain. Its methods must be cheap, must not
// block, and must be safe for concurrent use.
type Observer interface {
	// Reported is called for each report, with its usages and new buckets.
	Reported(domain string, buckets, subscribed int)
	// Requests is called for each bucket usage's allowed and denied.
	Requests(domain string, allowed, denied uint64)
	// ActionsSent is called when n bucket actions are sent to an Envoy.
	ActionsSent(domain string, n int)
	// Pushed is called for an assignment sent to an Envoy unasked: a cut,
	// or a raise that another's report or cut freed.
	Pushed(domain string)
	// Abandoned is called when a bucket is abandoned for being idle.
	Abandoned(domain string)
	// EmptyBucketID is called for a bucket usage with an empty bucket id.
	EmptyBucketID(domain string)
	// Unmatched is called for a bucket an Envoy subscribed that matches
	// no rule (and for one a change of rules leaves without).
	Unmatched(domain string)
	// Silent is called when a stream that sent no report for three
	// report periods is ended.
	Silent(domain string)
	// ReportRefused is called for a usage report refused for its size.
	ReportRefused(domain string)
	// Unidentified is called for a stream refused for naming no client
	// identity (Options.RequireIdentity), before it names a domain.
	Unidentified()
	// BucketsRefused is called for a report's n new buckets refused for
	// reason: RefusedStream, RefusedServer or RefusedID.
	BucketsRefused(domain, reason string, n int)
	// StreamRefused is called for a stream refused past MaxStreams.
	StreamRefused()
	// StoreFailed is called when a demand store exchange fails.
	StoreFailed()
	// Exchanged is called after each exchange, failed or not.
	Exchanged(took time.Duration, items int)
	// ReportsShed is called for n reports merged into one waiting for a
	// worker (Options.ReportWorkers): work shed.
	ReportsShed(domain string, n int)
}

// The reasons a new bucket is refused, as Observer.BucketsRefused is told.
const (
	RefusedStream = "stream" // its stream holds MaxBucketsPerStream
	RefusedServer = "server" // the streams hold MaxBuckets
	RefusedID     = "id"     // its id passes IDLimits
)

// nopObserver is the Observer of Options without one.
type nopObserver struct{}

func (nopObserver) Reported(string, int, int)          {}
func (nopObserver) Requests(string, uint64, uint64)    {}
func (nopObserver) ActionsSent(string, int)            {}
func (nopObserver) Pushed(string)                      {}
func (nopObserver) Abandoned(string)                   {}
func (nopObserver) EmptyBucketID(string)               {}
func (nopObserver) Unmatched(string)                   {}
func (nopObserver) Silent(string)                      {}
func (nopObserver) ReportRefused(string)               {}
func (nopObserver) Unidentified()                      {}
func (nopObserver) BucketsRefused(string, string, int) {}
func (nopObserver) StreamRefused()                     {}
func (nopObserver) StoreFailed()                       {}
func (nopObserver) Exchanged(time.Duration, int)       {}
func (nopObserver) ReportsShed(string, int)            {}

// label is what an Observer is told of a domain.
func (s *Service) label(domain string) string {
	if s.opts.Rules().Domain(domain) == nil {
		return UnknownDomain
	}
	return domain
}

// DomainTotals sum the state of one domain on this replica.
type DomainTotals struct {
	// Streams are the Envoy streams open, Buckets the buckets they hold,
	// Limits the limits divided (buckets sharing a counter count once).
	Streams, Buckets, Limits int
	// LimitRate, AssignedRate and DemandRate sum the limits' rates, the
	// rates assigned and the demand measured, in requests per second.
	LimitRate, AssignedRate, DemandRate float64
}

// Totals returns the state of every domain served (or UnknownDomain), for
// gauges; it holds each stream's and division's lock in turn, briefly.
func (s *Service) Totals() map[string]DomainTotals {
	out := map[string]DomainTotals{}
	s.mu.Lock()
	streams := make([]*stream, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	divs := make([]*division, 0, len(s.divisions))
	for _, dv := range s.divisions {
		divs = append(divs, dv)
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.mu.Lock()
		domain, n := st.domain, len(st.buckets)
		st.mu.Unlock()
		if domain == "" {
			continue
		}
		d := s.label(domain)
		t := out[d]
		t.Streams++
		t.Buckets += n
		out[d] = t
	}
	for _, dv := range divs {
		d := s.label(dv.domain)
		t := out[d]
		dv.mu.Lock()
		t.Limits++
		t.LimitRate += dv.q.Limit.Rate
		dv.q.Clients(func(c *quota.Client) {
			t.AssignedRate += c.Assigned
			if c.Known {
				t.DemandRate += c.Demand
			}
		})
		dv.mu.Unlock()
		out[d] = t
	}
	return out
}
