// Package limiter decides rate-limit requests: it matches each descriptor to
// its limit, builds the store keys, asks a Store for one batch of decisions
// and applies the request's semantics (replaces, unlimited, shadow and quota
// modes, hits addends, overrides, refunds) on the way back.
//
// Build a Limiter with New over a Store (pkg/store has Redis and Memory),
// give it rules with SetRules (pkg/rules or descriptors.NewSet builds them)
// and call Check. A Limiter is safe for concurrent use, and SetRules may
// swap the rules at any time. Store and AllOrNothingStore state the contract a
// store implements; limitertest checks it.
package limiter
