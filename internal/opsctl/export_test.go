package opsctl

import "context"

// SetLookupHost replaces the resolver of dns:/// addresses until the
// returned func restores it.
func SetLookupHost(f func(ctx context.Context, host string) ([]string, error)) (restore func()) {
	old := lookupHost
	lookupHost = f
	return func() { lookupHost = old }
}

// Term is term, for the tests.
var Term = term
