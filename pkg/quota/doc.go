// Package quota divides a bucket's global rate limit among the clients
// (Envoy streams) that share it, by max-min fairness on their measured
// demand, and expresses each share as a token bucket that Envoy's
// rate_limit_quota filter enforces as meant.
//
// It is pure: no I/O, no goroutines, no logging; time is an argument. The
// RLQS adapter (package rlqs) feeds it reports, the demand other replicas
// published (through a store, see Item and Demand), and asks for shares.
package quota
