// Package layout holds the tests that keep the tree as docs/development.md
// describes it: imports one way (cmd → settings, server → adapters →
// observers → store → limiter → descriptors), pkg/ free of internal/,
// Envoy's protos and go-redis in the packages that own them, and nothing
// built tracked. It has no code of its own.
package layout
