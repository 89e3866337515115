// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3): it maps each bucket an Envoy
// reports onto its domain's rules and divides the rule's limit among the
// Envoys that share the bucket, by max-min fairness on their demand
// (package quota), across replicas through a DemandStore (package demand).
//
// To embed it, call New with Options.Rules (a Limiter's Rules) and a
// demand store, Register the Service on a grpc.Server, and Close it before
// the server's GracefulStop: a stream lasts as long as its Envoy, and
// Close ends each one so that its Envoy moves to another replica.
// Options.Observer is told of the service's events; Totals and Usage read
// its state. docs/rlqs.md describes the protocol and the division.
package rlqs
