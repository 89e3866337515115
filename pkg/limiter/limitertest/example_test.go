package limitertest_test

import (
	"testing"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/limiter/limitertest"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// newMemory gives each subtest of the suite a store of its own, closed
// when the subtest ends.
func newMemory(t *testing.T) limiter.Store {
	s := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// conformance is what a store's package writes, as TestConformance in one
// of its _test.go files: the whole suite, on a fresh store per subtest. A
// store shared by several subtests works too, since each uses keys of its
// own under limitertest.KeyPrefix; one that implements
// limitertest.Inspector has every key's expiry checked as well.
func conformance(t *testing.T) {
	limitertest.Run(t, newMemory)
}

// This example is compiled, not run: Run needs the *testing.T of a test.
func ExampleRun() {
	_ = conformance
}
