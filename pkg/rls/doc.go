// Package rls serves Envoy's RateLimitService (envoy.service.ratelimit.v3)
// over a limiter.Limiter: it turns each ShouldRateLimit request into a
// limiter request, decides it, and answers with statuses, response headers
// and dynamic metadata, over gRPC and as JSON over HTTP (Service.JSON).
//
// To embed it, build a limiter.Limiter on a store (store.NewMemory or
// store.NewRedis), give it rules (rules.Load, Limiter.SetRules), and
// Register New's Service on a grpc.Server made with ServerOption.
// Options.Observer is told of every decision, for metrics and stats, and
// Options.Spans annotates the caller's trace span; both may be nil.
package rls
