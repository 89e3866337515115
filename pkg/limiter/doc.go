// Package limiter decides rate-limit requests: it matches each descriptor
// to its limit, builds store keys, asks a Store for one batch of decisions,
// and applies the request-level semantics (replaces, unlimited, shadow and
// quota modes, hits addends, overrides) on the way back.
package limiter
