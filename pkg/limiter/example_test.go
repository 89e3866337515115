package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// A limiter on the in-process store decides three requests against a limit
// of two a minute. The store's clock is fixed here so that the output does
// not depend on when the example runs; leave MemoryOptions.Now nil in a
// program.
func ExampleCheck() {
	loaded, err := rules.Parse(map[string][]byte{
		"api.yaml": []byte("domain: api\ndescriptors: [{key: api_key, rate_limit: {unit: minute, requests_per_unit: 2}}]\n"),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2025, 1, 1, 12, 0, 15, 0, time.UTC)
	mem := store.NewMemory(store.MemoryOptions{Now: func() time.Time { return now }})
	defer mem.Close()
	lim := limiter.New(mem, limiter.Options{})
	lim.SetRules(loaded.Set)

	req := &limiter.Request[descriptors.Entry]{
		Domain: "api",
		Descriptors: []limiter.Descriptor[descriptors.Entry]{{
			Entries: []descriptors.Entry{{Key: "api_key", Value: "alice"}},
		}},
	}
	for range 3 {
		resp, err := limiter.Check(context.Background(), lim, req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.Statuses[0]
		fmt.Println(resp.Code, "remaining", st.Remaining, "reset in", time.Duration(st.ResetMillis)*time.Millisecond)
	}
	// Output:
	// OK remaining 1 reset in 45s
	// OK remaining 0 reset in 45s
	// OVER_LIMIT remaining 0 reset in 45s
}
