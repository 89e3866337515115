// Package envoysim simulates Envoy's rate_limit_quota HTTP filter as a
// client of a Rate Limit Quota Service, so that FastLimit's RLQS server can
// be tested and measured without Envoy (which cannot be installed here).
//
// An Envoy is one of the filter's global clients: one bucket cache and one
// StreamRateLimitQuotas stream per (RLQS server, domain). It decides
// requests locally from the server's assignments and reports usage as
// Envoy does, and it counts every protocol rule the server breaks
// (Violations). It follows these files of envoyproxy/envoy, as read with
// the search tools (docs/rlqs.md lists each behaviour and where):
//
//   - source/extensions/filters/http/rate_limit_quota/filter.cc:
//     recordBucketUsage, noAssignmentBehaviorShouldAllow,
//     shouldAllowRequest (how a request is decided);
//   - .../global_client_impl.cc: createBucketImpl (subscription report),
//     getUsageFromBucket and buildReports (deltas, time_elapsed truncated
//     to whole seconds), onSendReportsTimer (every cached bucket each
//     period, stream reopened at the tick, usage dropped when it cannot
//     be), onQuotaResponseImpl (unknown and empty ids dropped, abandon,
//     requests_per_time_unit dropped), createTokenBucketFromAction and
//     shouldReplaceTokenBucket (whole-second fill interval, the kept
//     bucket, the replaced bucket's start), startActionExpirationTimer,
//     onActionExpirationTimer, onFallbackExpirationTimer (whole-second
//     TTLs, expired_assignment_behavior, then no_assignment_behavior),
//     onRemoteClose;
//   - .../filter_persistence.cc: initTlsStore (the 5-second report
//     period);
//   - source/common/common/token_bucket_impl.{h,cc}: AtomicTokenBucketImpl
//     (continuous refill, kMinFillRate, what +Inf and NaN rates do).
//
// An Envoy runs on a Clock: a ManualClock steps time for unit tests (Fleet
// runs many Envoys and their traffic in steps and waits for the server's
// answers in between), and the wall clock drives the same code against a
// real server (Fleet.RunRealtime).
package envoysim
