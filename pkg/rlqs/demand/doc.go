// Package demand holds the demand stores of package rlqs, which share the
// demand of every (bucket, Envoy stream) among the replicas dividing a
// limit: Redis through a Redis server, one round trip per exchange, and
// Memory in process, for tests and for replicas of one process. Either is
// an rlqs.DemandStore, given as rlqs.Options.Store.
package demand
