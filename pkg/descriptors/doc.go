// Package descriptors is the rate-limit rules model: domains, nested
// descriptor rules and their limits, and Match, which finds the one limit a
// request's descriptor entries hit, as envoyproxy/ratelimit matches them.
//
// Build a Set with NewSet from DomainConfig values (pkg/rules builds them
// from rules files and xDS resources), look a domain up with Set.Domain and
// match entries with Match, or an unordered bucket id with MatchBucket. A
// Set, its Domains and its Limits are immutable and safe for concurrent use;
// swap a whole Set on reload.
package descriptors
