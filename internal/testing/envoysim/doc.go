// Package envoysim simulates Envoy's rate_limit_quota HTTP filter as a
// client of a Rate Limit Quota Service, so that FastLimit's RLQS server can
// be tested without Envoy. An Envoy is one of the filter's global clients:
// it decides requests from the server's assignments, reports usage as
// Envoy does, and counts every protocol rule the server breaks. It runs on
// a ManualClock in tests (Fleet) or on the wall clock (Fleet.RunRealtime).
// docs/rlqs.md#tests-and-the-envoy-simulator maps it to Envoy's source.
package envoysim
