// Package layout holds the test that keeps the project's import graph
// one-way (cmd → settings, server → adapters → observability → store →
// limiter → descriptors) and Envoy's protos and go-redis in the packages
// that own them. It has no code of its own.
package layout
