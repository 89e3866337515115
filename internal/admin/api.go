package admin

import (
	"time"

	"github.com/fastlimit/fastlimit/internal/observe/top"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// The JSON of the admin API's answers and bodies: what the handlers write
// and package opsctl reads. The top identifiers' answer is top.Answer.

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
	// UnknownDomain: the rules in force have no rule of Domain (a
	// misspelt domain: every descriptor is OK); Domains are theirs.
	UnknownDomain bool     `json:"unknown_domain,omitempty"`
	Domains       []string `json:"domains,omitempty"`
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

// Status is the answer of GET /v1/status: what the admin page shows but
// the rules table.
type Status struct {
	Version   string      `json:"version"`
	Time      time.Time   `json:"time"`
	Store     StoreStatus `json:"store"`
	Rules     RulesStatus `json:"rules"`
	TopKeys   int         `json:"top_keys"` // 0: top identifiers are off
	TopWindow string      `json:"top_window"`
	// Limited are the rules with over-limit identifiers, most limited first.
	Limited []top.Ranking                `json:"limited"`
	RLQS    map[string]rlqs.DomainTotals `json:"rlqs,omitempty"`
	// Divisions are the first divisionsOnPage RLQS divisions, as
	// /v1/quota answers each; MoreDivisions counts those left out.
	Divisions     []RLQSDivision `json:"rlqs_divisions,omitempty"`
	MoreDivisions int            `json:"rlqs_more_divisions,omitempty"`
}

// RLQSDivision is an RLQS division on the page: its first clientsOnPage
// clients, those assigned the most, and how many it left out.
type RLQSDivision struct {
	rlqs.Usage
	MoreClients int `json:"more_clients,omitempty"`
}

// StoreStatus is the store's state.
type StoreStatus struct {
	Kind     string `json:"kind"` // memory or redis
	Name     string `json:"name"`
	Answered bool   `json:"answered"` // since the start
	Breaker  string `json:"breaker,omitempty"`
	// The embedded store's entries and refusals (--memory-max-keys).
	MemoryKeys    *int64 `json:"memory_keys,omitempty"`
	MemoryMaxKeys int    `json:"memory_max_keys,omitempty"`
	MemoryRefused *int64 `json:"memory_refused,omitempty"`
	// The over-limit cache's entries and hits (--over-limit-cache-bytes).
	CacheEntries *int    `json:"cache_entries,omitempty"`
	CacheHits    *uint64 `json:"cache_hits,omitempty"`
}

// RulesStatus is the rules in force and how their loads went.
type RulesStatus struct {
	Hash    string        `json:"hash"`
	From    string        `json:"from"` // file or xds
	Files   []string      `json:"files"`
	Domains int           `json:"domains"`
	Limits  int           `json:"limits"`
	Reload  *ReloadStatus `json:"reload,omitempty"`
}

// ReloadStatus is how the loads of the rules went.
type ReloadStatus struct {
	Failing bool      `json:"failing"` // the last load failed: older rules are in force
	At      time.Time `json:"at"`      // of the last load
	// ErrorAt and Errors are the last failed load's, if any.
	ErrorAt time.Time `json:"error_at,omitzero"`
	Errors  []string  `json:"errors,omitempty"`
}

// RuleRow is one rule of /v1/status/rules.
type RuleRow struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	Source string `json:"source"`
	Limit  string `json:"limit"`
	Shadow bool   `json:"shadow_mode,omitempty"`
	// Hits and OverLimit are the process's counters since its start.
	Hits      float64 `json:"hits"`
	OverLimit float64 `json:"over_limit"`
}

// RulesPage is the answer of /v1/status/rules.
type RulesPage struct {
	Total  int       `json:"total"` // rules matching q
	Offset int       `json:"offset"`
	Rules  []RuleRow `json:"rules"`
}
