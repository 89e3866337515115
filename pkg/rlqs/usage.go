package rlqs

import (
	"maps"
	"sort"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// Usage is how one bucket's limit is divided on this replica; the
// binary's admin listener answers it as JSON at /v1/quota.
type Usage struct {
	Domain string            `json:"domain"`
	Bucket map[string]string `json:"bucket"`
	// Matched is false when no rule matches the bucket.
	Matched bool   `json:"matched"`
	Rule    string `json:"rule,omitempty"`
	// Assignment is token_bucket (a divided limit), allow_all or deny_all.
	Assignment string  `json:"assignment"`
	LimitRate  float64 `json:"limit_rps,omitempty"`
	Burst      float64 `json:"burst,omitempty"`
	Key        string  `json:"key,omitempty"`
	// Replicas serve the bucket, this one included, as last read.
	Replicas int `json:"replicas,omitempty"`
	// RemoteReadAgoMs is the age of that read; absent if never read.
	RemoteReadAgoMs *int64        `json:"remote_read_ago_ms,omitempty"`
	Clients         []UsageClient `json:"clients"`
}

// UsageClient is one client (an Envoy stream's bucket) of a division.
type UsageClient struct {
	Replica string `json:"replica"`
	Client  string `json:"client"`
	Local   bool   `json:"local"`
	// DemandRate is the demand in requests per second, absent if unknown.
	DemandRate *float64 `json:"demand_rps,omitempty"`
	// AssignedRate is the rate its Envoy may hold (docs/rlqs.md, "The
	// ledger"): a local client's, or a remote one's as last read.
	AssignedRate *float64 `json:"assigned_rps,omitempty"`
	// LastReportAgoMs is the time since its last report (local only).
	LastReportAgoMs *int64 `json:"last_report_ago_ms,omitempty"`
}

// Usage returns how a bucket's limit is divided; it changes nothing.
func (s *Service) Usage(domain string, id map[string]string) Usage {
	u := Usage{Domain: domain, Bucket: id, Clients: []UsageClient{}}
	entries, text := canonical(id)
	res := s.resolver.resolve(s.opts.Rules(), domain, entries, text)
	if res.limit != nil {
		u.Matched, u.Rule = true, res.limit.Path
	}
	switch res.kind {
	case allowAll:
		u.Assignment = "allow_all"
		return u
	case denyAll:
		u.Assignment = "deny_all"
		return u
	}
	u.Assignment, u.LimitRate, u.Burst, u.Key = "token_bucket", res.global.Rate, res.global.Burst, res.storeKey
	s.mu.Lock()
	dv := s.divisions[res.storeKey]
	s.mu.Unlock()
	if dv == nil {
		return u
	}
	now := s.opts.Clock.Now()
	dv.mu.Lock()
	defer dv.mu.Unlock()
	u.Replicas = dv.q.Replicas()
	remote, at := dv.q.Remote()
	if !at.IsZero() {
		u.RemoteReadAgoMs = ptr(now.Sub(at).Milliseconds())
	}
	dv.q.Clients(func(c *quota.Client) {
		uc := UsageClient{Replica: s.opts.Replica, Client: c.ID, Local: true,
			AssignedRate: ptr(c.Assigned), LastReportAgoMs: ptr(now.Sub(c.LastReport).Milliseconds())}
		if c.Known {
			uc.DemandRate = ptr(c.Demand)
		}
		u.Clients = append(u.Clients, uc)
	})
	for _, d := range remote {
		uc := UsageClient{Replica: d.Replica, Client: d.Client, AssignedRate: ptr(d.Assigned)}
		if d.Rate >= 0 {
			uc.DemandRate = ptr(d.Rate)
		}
		u.Clients = append(u.Clients, uc)
	}
	sort.Slice(u.Clients, func(i, j int) bool {
		a, b := u.Clients[i], u.Clients[j]
		return a.Replica+"/"+a.Client < b.Replica+"/"+b.Client
	})
	return u
}

// Divisions returns the limits divided on this replica, each as Usage
// answers it for one of its Envoy buckets (share_threshold's buckets share
// one division): the first n by domain and store key, and how many
// divisions there are in all, so that a caller can say how many it left
// out. A division no bucket holds, a moment before it is forgotten, is
// left out.
func (s *Service) Divisions(n int) (shown []Usage, total int) {
	s.mu.Lock()
	divs := make([]*division, 0, len(s.divisions))
	for _, dv := range s.divisions {
		divs = append(divs, dv)
	}
	s.mu.Unlock()
	sort.Slice(divs, func(i, j int) bool {
		a, b := divs[i], divs[j]
		return a.domain < b.domain || a.domain == b.domain && a.key < b.key
	})
	shown = []Usage{}
	for _, dv := range divs {
		if len(shown) == n {
			break
		}
		if id := dv.anyBucket(); id != nil {
			shown = append(shown, s.Usage(dv.domain, id))
		}
	}
	return shown, len(divs)
}

// anyBucket is the id of the division's bucket first in canonical order,
// nil without one.
func (dv *division) anyBucket() map[string]string {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	var first *envoyBucket
	for _, b := range dv.buckets {
		if first == nil || b.text < first.text {
			first = b
		}
	}
	if first == nil {
		return nil
	}
	return maps.Clone(first.id)
}

func ptr[T any](v T) *T { return &v }
