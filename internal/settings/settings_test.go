package settings

import (
	"io"
	"testing"
	"time"
)

// TestNearLimitRatioFlag refuses ratios outside (0, 1], and reads the
// admin settings from their environment twins.
func TestNearLimitRatioFlag(t *testing.T) {
	for _, v := range []string{"0", "-0.1", "1.5", "NaN"} {
		o, err := Parse("test", []string{"--near-limit-ratio", v}, func(string) string { return "" }, io.Discard)
		if err != nil {
			continue // rejected by the flag parser: fine too
		}
		if err := o.Validate(); err == nil {
			t.Errorf("--near-limit-ratio %s accepted", v)
		}
	}
	o, err := Parse("test", nil, func(k string) string {
		return map[string]string{"ADMIN_ADDR": "127.0.0.1:7000", "NEAR_LIMIT_RATIO": "0.9", "PPROF": "true",
			"MAX_DETAILED_METRIC_SERIES": "7"}[k]
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Admin != (Admin{Addr: "127.0.0.1:7000", Pprof: true, NearLimitRatio: 0.9, MaxDetailedMetricSeries: 7,
		TopKeys: 100, TopWindow: 5 * time.Minute, LogTopLimited: true}) {
		t.Fatalf("environment twins: %+v", o.Admin)
	}
}
