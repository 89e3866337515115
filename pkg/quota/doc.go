// Package quota divides a bucket's rate limit among the Envoy streams that
// share it, by max-min fairness on their demand, and encodes each share as
// the token bucket Envoy enforces (docs/rlqs.md, "Dividing a limit"). It is
// pure: no I/O, goroutines or logging; time is an argument. Fair divides a
// capacity; a Bucket (NewBucket, Join, Client.Observe, SetRemote) gives its
// clients' Shares to Settle and Encode. A Bucket needs a lock to be shared.
package quota
