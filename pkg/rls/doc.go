// Package rls serves Envoy's RateLimitService (envoy.service.ratelimit.v3)
// over a limiter.Limiter, on gRPC and as JSON over HTTP (Service.JSON).
//
// To embed it, build a limiter.Limiter on a store (store.NewMemory or
// store.NewRedis) with rules (Limiter.SetRules), and Register New's
// Service on a grpc.Server made with ServerOption. Options.Observer is
// told of every decision and Options.Spans annotates trace spans; both
// may be nil.
package rls
