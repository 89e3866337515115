// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService): it maps each
// bucket an Envoy reports onto its domain's rules and divides the rule's
// limit among the Envoys that share the bucket, by max-min fairness on
// their demand (package quota), across FastLimit replicas through a
// demand store. It is the sibling of the RateLimitService adapter; see
// docs/rlqs.md.
package rlqs
