package rlqs_test

import (
	"github.com/fastlimit/fastlimit/internal/testing/clock"
	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	wall "github.com/fastlimit/fastlimit/pkg/clock"
	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// The service runs on the default clock, the tests' fake clock and the
// Envoy simulator's.
var (
	_ rlqs.Clock = wall.Wall{}
	_ rlqs.Clock = (*clock.Clock)(nil)
	_ rlqs.Clock = (*envoysim.ManualClock)(nil)
)
