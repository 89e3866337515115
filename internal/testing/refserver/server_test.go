package refserver_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/refserver"
)

// TestVersionIsInstalled: scripts/test.sh installs the Version the docs
// and the settings table name.
func TestVersionIsInstalled(t *testing.T) {
	if b := files.Read(t, "../../../scripts/test.sh"); !bytes.Contains(b, []byte("version="+refserver.Version+"\n")) {
		t.Errorf("scripts/test.sh does not install envoyproxy/ratelimit %s", refserver.Version)
	}
}

// TestStart: the reference decides with rules it loads, and names the key
// of rules it refuses.
func TestStart(t *testing.T) {
	ok := refserver.Start(t, refserver.Options{Rules: map[string]string{
		"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"}})
	if err := ok.LoadError(); err != nil {
		t.Fatalf("LoadError: %v", err)
	}
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*common.RateLimitDescriptor{
		{Entries: []*common.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	var codes []rlspb.RateLimitResponse_Code
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := ok.Client.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.GetOverallCode())
	}
	if codes[0] != rlspb.RateLimitResponse_OK || codes[1] != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("codes %v, want OK then OVER_LIMIT", codes)
	}

	bad := refserver.Start(t, refserver.Options{Rules: map[string]string{"m.yaml": string(refserver.MetadataRules)}})
	if err := bad.LoadError(); err == nil || !strings.Contains(err.Error(), "unknown key 'metadata'") {
		t.Errorf("LoadError: %v, want the metadata key named", err)
	}
}
