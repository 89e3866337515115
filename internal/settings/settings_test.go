package settings

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
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
	if o.Admin != (Admin{Addr: "127.0.0.1:7000", Pprof: true}) ||
		o.Metrics != (metrics.Options{NearLimitRatio: 0.9, MaxDetailedMetricSeries: 7}) || o.RefStats.NearLimitRatio != 0.9 ||
		o.Top.Keys != 100 || o.Top.Window != 5*time.Minute || !o.Top.LogTopLimited {
		t.Fatalf("environment twins: %+v %+v %+v", o.Admin, o.Metrics, o.Top)
	}
}

// TestVersionFlag: --version anywhere among the flags returns ErrVersion
// before the environment is read; it is no setting, so VERSION (another
// program's variable) neither sets it nor fails the parse, and no warning
// names it.
func TestVersionFlag(t *testing.T) {
	bad := func(k string) string { return map[string]string{"LOG_LEVEL": "verbose"}[k] }
	for _, args := range [][]string{{"--version"}, {"--log-level", "info", "-version", "--http-addr", ":1"}} {
		if _, err := Parse("test", args, bad, io.Discard); !errors.Is(err, ErrVersion) {
			t.Errorf("%q: %v, want ErrVersion", args, err)
		}
	}
	for _, v := range []string{"1.2.3", "true"} {
		s, err := Parse("test", nil, func(k string) string { return map[string]string{"VERSION": v}[k] }, io.Discard)
		if err != nil {
			t.Errorf("VERSION=%s: %v", v, err)
		} else if len(s.Warnings()) != 0 || len(s.Deprecated()) != 0 {
			t.Errorf("VERSION=%s: warnings %q %q", v, s.Warnings(), s.Deprecated())
		}
	}
}
