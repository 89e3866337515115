package rls

import (
	"context"
	"testing"

	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// TestAnswersEncodeNotUTF8: whatever bytes a request's domain, keys and
// values hold (the Codec passes them as sent), the answer, with its
// dynamic metadata and headers, encodes: protobuf refuses a string that
// is not UTF-8, and gRPC would then fail the call.
func TestAnswersEncodeNotUTF8(t *testing.T) {
	rs, err := rules.Parse(map[string][]byte{
		"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	st := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { _ = st.Close() })
	l := limiter.New(st, limiter.Options{})
	l.SetRules(rs.Set)
	s := New(l, Options{Headers: HeaderOptions{ResponseHeaders: HeadersIETF, DynamicMetadata: true}}, zaptest.NewLogger(t))
	for _, tc := range []struct{ name, domain, key, value string }{
		{"a domain", "d\xff\xfe", "k", "v"}, // no rules: answered OK, with its descriptors
		{"a key", "d", "k\xc0", "v"},
		{"a value", "d", "k", "v\xe2\x82"},
	} {
		for _, n := range []string{"first", "over the limit"} {
			resp, err := s.ShouldRateLimit(context.Background(), rlsRequest(tc.domain, tc.key, tc.value))
			if err != nil {
				t.Fatalf("%s not UTF-8, %s: %v", tc.name, n, err)
			}
			if _, err := proto.Marshal(resp); err != nil {
				t.Errorf("%s not UTF-8, %s: the answer does not encode: %v", tc.name, n, err)
			}
		}
	}
}
