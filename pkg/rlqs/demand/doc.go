// Package demand holds the demand stores of package rlqs, which share the
// demand of every (bucket, Envoy stream) among replicas: Redis through a
// Redis server, one round trip an exchange, and Memory in process. Either
// is an rlqs.DemandStore, given as rlqs.Options.Store.
package demand
