// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3): it divides each rule's limit among
// the Envoys sharing its bucket, by max-min fairness on their demand
// (package quota), across replicas through a DemandStore (package demand).
//
// To embed it, call New with Options.Rules (a Limiter's Rules) and a
// demand store, Register the Service on a grpc.Server, and Close it before
// the server's GracefulStop, which would wait for every Envoy's stream.
// Options.Observer is told of events; Totals and Usage read the state.
package rlqs
