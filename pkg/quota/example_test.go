package quota_test

import (
	"fmt"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// Fair divides a capacity of 100 among three wants: the two small ones are
// met, the large one gets the rest.
func ExampleFair() {
	shares := make([]float64, 3)
	quota.Fair(100, []float64{10, 30, 500}, shares)
	fmt.Println(shares)
	// Output:
	// [10 30 60]
}

// A bucket of 100 requests a second shared by two Envoy streams on this
// replica, one sending 20 a second, the other 200: the first gets its
// demand and 10% headroom, the second the rest, each share encoded as the
// token bucket Envoy enforces.
func ExampleBucket_Shares() {
	cfg := quota.Config{}.WithDefaults()
	b := quota.NewBucket(quota.Limit{Rate: 100, Burst: 100})
	start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for id, perSecond := range map[string]uint64{"envoy-a": 20, "envoy-b": 200} {
		c := b.Join(id, start)
		c.Observe(0, 0, start, &cfg)                           // the subscription
		c.Observe(5*perSecond, 0, start.Add(cfg.Period), &cfg) // a report a period later
	}
	shares := map[string]float64{}
	b.Shares(quota.Global, &cfg, func(c *quota.Client, share float64) {
		c.Assigned = quota.Settle(c.Assigned, share, &cfg)
		shares[c.ID] = c.Assigned
	})
	for _, id := range []string{"envoy-a", "envoy-b"} {
		tb, _ := quota.Encode(shares[id], b.Limit.BurstOf(shares[id]))
		fmt.Printf("%s: %.0f/s, %d tokens per %ds, max %d\n", id, shares[id], tb.TokensPerFill, tb.FillSeconds, tb.MaxTokens)
	}
	// Output:
	// envoy-a: 22/s, 110 tokens per 5s, max 22
	// envoy-b: 78/s, 156 tokens per 2s, max 78
}
