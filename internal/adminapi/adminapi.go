// Package adminapi is the JSON of the admin listener's endpoints: what
// package server answers and package opsctl reads. The top identifiers'
// answer is top.Answer.
package adminapi

import "github.com/fastlimit/fastlimit/pkg/rlqs"

// Entry is a descriptor entry, or a rule's level (Value "" for key-only).
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Usage is the answer of GET /v1/usage: one descriptor's state, its
// limit's (of a rule with several, the one that decides) and, of a rule
// with several, each limit's in Limits.
type Usage struct {
	Domain     string  `json:"domain"`
	Descriptor []Entry `json:"descriptor"`
	Matched    bool    `json:"matched"`
	UsageLimit
	ShadowMode bool         `json:"shadow_mode,omitempty"`
	QuotaMode  bool         `json:"quota_mode,omitempty"`
	Limits     []UsageLimit `json:"limits,omitempty"`
}

// UsageLimit is one limit's state in a Usage; Rule is its label
// ("domain.key#daily" for one of several).
type UsageLimit struct {
	Rule      string   `json:"rule,omitempty"`
	Name      string   `json:"name,omitempty"`
	Algorithm string   `json:"algorithm,omitempty"`
	Unit      string   `json:"unit,omitempty"`
	Unlimited bool     `json:"unlimited,omitempty"`
	Limit     *uint32  `json:"limit,omitempty"`
	Remaining *uint32  `json:"remaining,omitempty"`
	ResetMs   *int64   `json:"reset_ms,omitempty"`
	Tokens    *uint32  `json:"tokens,omitempty"`
	Burst     *float64 `json:"burst,omitempty"`
	FullInMs  *int64   `json:"full_in_ms,omitempty"`
}

// Explanation is the answer of POST /v1/explain for a RateLimitRequest.
type Explanation struct {
	Domain string `json:"domain"`
	// Code is the overall code the request would get now.
	Code        string      `json:"code"`
	Descriptors []Explained `json:"descriptors"`
	Store       string      `json:"store"` // memory or redis
}

// Explained is one descriptor of an Explanation, or its state before or
// after a counters write. Its Rule and state are those of its limit, of a
// rule with several the one that decides; Limits lists each of them.
type Explained struct {
	Entries  []Entry `json:"entries"`
	Code     string  `json:"code"`
	Matched  bool    `json:"matched"`
	Replaced bool    `json:"replaced,omitempty"`
	Rule     *Rule   `json:"rule,omitempty"`
	Hits     uint64  `json:"hits"`
	Refund   bool    `json:"refund,omitempty"`
	Quota    bool    `json:"quota,omitempty"`
	Shadowed bool    `json:"shadowed,omitempty"`
	State
	// Limits are, of a rule with several limits (rate_limits), each of
	// them in the rule's order, those another limit replaced included.
	Limits []ExplainedLimit `json:"limits,omitempty"`
}

// State is a limit's state before the charge.
type State struct {
	// Keys are the store keys the limit reads, window starts by the
	// server's clock.
	Keys []string `json:"keys,omitempty"`
	// Count and Remaining are whole requests of a window, Tokens a
	// bucket's, before the charge.
	Count        *int64  `json:"count,omitempty"`
	Remaining    *uint32 `json:"remaining,omitempty"`
	Tokens       *uint32 `json:"tokens,omitempty"`
	ResetMs      *int64  `json:"reset_ms,omitempty"`
	RetryAfterMs *int64  `json:"retry_after_ms,omitempty"`
}

// ExplainedLimit is one limit of a rule with several: its label
// ("api.account#daily", "api.account#0"), whether it decides the
// descriptor's status, its own answer (though a joint denial charges
// none), its size and its state; a replaced one has its label alone.
type ExplainedLimit struct {
	Label    string   `json:"label"`
	Name     string   `json:"name,omitempty"`
	Decides  bool     `json:"decides,omitempty"`
	Replaced bool     `json:"replaced,omitempty"`
	Code     string   `json:"code,omitempty"`
	Shadowed bool     `json:"shadowed,omitempty"`
	Replaces []string `json:"replaces,omitempty"`
	Spec
	State
}

// Spec is a limit's size.
type Spec struct {
	Algorithm       string   `json:"algorithm,omitempty"`
	Unit            string   `json:"unit,omitempty"`
	RequestsPerUnit uint32   `json:"requests_per_unit,omitempty"`
	UnitMultiplier  uint32   `json:"unit_multiplier,omitempty"`
	Burst           *float64 `json:"burst,omitempty"`
	Cost            float64  `json:"cost,omitempty"`
}

// Rule describes a rule (a limit) and where it comes from.
type Rule struct {
	Domain string  `json:"domain"`
	Path   string  `json:"path"`
	Levels []Entry `json:"levels"`
	// Source is "file:line", the xDS resource and descriptor, or
	// "request" for a limit override; From says which: file, xds, request.
	Source    string `json:"source"`
	From      string `json:"from"`
	Name      string `json:"name,omitempty"`
	Unlimited bool   `json:"unlimited,omitempty"`
	Spec
	ShadowMode bool     `json:"shadow_mode"`
	QuotaMode  bool     `json:"quota_mode"`
	Replaces   []string `json:"replaces,omitempty"`
}

// BucketExplanation is the answer of POST /v1/explain for an RLQS bucket.
type BucketExplanation struct {
	Domain string            `json:"domain"`
	Bucket map[string]string `json:"bucket"`
	Rule   *Rule             `json:"rule,omitempty"`
	// Division is how the bucket's limit is divided among Envoys now.
	Division rlqs.Usage `json:"division"`
}

// CountersBody is the body of POST /v1/counters/reset and /refund: a
// domain's descriptors, or one rule's path and the values of its key-only
// and wildcard levels, in order; and for a refund the hits to give back.
type CountersBody struct {
	Domain      string       `json:"domain"`
	Descriptors []Descriptor `json:"descriptors,omitempty"`
	Rule        string       `json:"rule,omitempty"`
	Values      []string     `json:"values,omitempty"`
	Hits        uint64       `json:"hits,omitempty"`
}

// Descriptor is a descriptor of a CountersBody.
type Descriptor struct {
	Entries []Entry `json:"entries"`
}

// CountersAnswer is the answer of a counters write.
type CountersAnswer struct {
	Action      string           `json:"action"`
	Who         string           `json:"who"`
	Domain      string           `json:"domain"`
	Descriptors []CountersChange `json:"descriptors"`
}

// CountersChange is one descriptor's state before and after a write.
type CountersChange struct {
	Before Explained `json:"before"`
	After  Explained `json:"after"`
}
