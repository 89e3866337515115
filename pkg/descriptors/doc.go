// Package descriptors holds the rate-limit rules model: domains, nested
// descriptor rules and their limits, and the matching of a request's
// descriptor entries to the one limit that applies, as envoyproxy/ratelimit
// matches them.
package descriptors
