package demand_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fastlimit/fastlimit/pkg/quota"
	"github.com/fastlimit/fastlimit/pkg/rlqs/demand"
)

// Two replicas publish their clients' demand in one bucket; the second
// reads back every live demand, its own included, in the same exchange.
func ExampleMemory_Exchange() {
	d := demand.NewMemory(nil)
	ctx, ttl := context.Background(), 15*time.Second
	_, err := d.Exchange(ctx, []quota.Item{{Key: "api:checkout:rlqs", Op: quota.Write,
		Demand: quota.Demand{Replica: "r1", Client: "envoy-1", Rate: 8}}}, ttl, time.Time{})
	if err != nil {
		log.Fatal(err)
	}
	got, err := d.Exchange(ctx, []quota.Item{{Key: "api:checkout:rlqs", Op: quota.Write | quota.Read,
		Demand: quota.Demand{Replica: "r2", Client: "envoy-2", Rate: 2.5}}}, ttl, time.Time{})
	if err != nil {
		log.Fatal(err)
	}
	total := 0.0
	for _, dm := range got[0] {
		total += dm.Rate
	}
	fmt.Println(len(got[0]), "clients,", total, "requests/s")
	// Output:
	// 2 clients, 10.5 requests/s
}
