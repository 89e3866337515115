package settings

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

// TestRLQSRecvBytes: the gRPC server receives the larger of the RLS and
// the RLQS limits, RLS's alone with RLQS off.
func TestRLQSRecvBytes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 4 << 20},
		{[]string{"--rlqs"}, 16 << 20},
		{[]string{"--rlqs", "--max-request-bytes", "33554432"}, 32 << 20},
		{[]string{"--rlqs", "--rlqs-max-report-bytes", "1048576"}, 4 << 20},
	} {
		s, err := Parse("test", tc.args, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.RLQS.RecvBytes(s.MaxRequestBytes); got != tc.want {
			t.Errorf("%v: receive limit %d, want %d", tc.args, got, tc.want)
		}
	}
}

func TestRLQSSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		err    string // in Validate's error; "" for none
		policy rlqs.StorePolicy
		check  func(t *testing.T, o rlqs.Options)
	}{
		{name: "defaults", args: []string{"--rlqs"}, policy: rlqs.StoreKeep, check: func(t *testing.T, o rlqs.Options) {
			if o.ReportPeriod != 5*time.Second || o.TTLPeriods != 6 || o.IdleAfter != 10*time.Minute || o.Unmatched != rlqs.UnmatchedAllow ||
				o.MaxBucketsPerStream != rlqs.DefaultMaxBucketsPerStream || o.MaxBuckets != rlqs.DefaultMaxBuckets || o.MaxStreams != rlqs.DefaultMaxStreams {
				t.Errorf("options = %+v", o)
			}
		}},
		{name: "follows --on-store-error allow", args: []string{"--rlqs", "--on-store-error", "allow"}, policy: rlqs.StoreAllow},
		{name: "follows --on-store-error deny", args: []string{"--rlqs", "--on-store-error", "deny"}, policy: rlqs.StoreDeny},
		{name: "its own policy wins", args: []string{"--rlqs", "--on-store-error", "deny", "--rlqs-on-store-error", "split"}, policy: rlqs.StoreSplit},
		{name: "environment twins", env: map[string]string{"RLQS": "true", "RLQS_ON_STORE_ERROR": "allow", "RLQS_UNMATCHED": "deny",
			"RLQS_IDLE_AFTER": "0", "RLQS_REPORT_PERIOD": "1s", "RLQS_REPLICA": "pod-1"}, policy: rlqs.StoreAllow,
			check: func(t *testing.T, o rlqs.Options) {
				if o.Unmatched != rlqs.UnmatchedDeny || o.IdleAfter >= 0 || o.ReportPeriod != time.Second || o.Replica != "pod-1" {
					t.Errorf("options = %+v", o)
				}
			}},
		{name: "bad policy", args: []string{"--rlqs", "--rlqs-on-store-error", "error"}, err: "--rlqs-on-store-error"},
		{name: "bad unmatched", env: map[string]string{"RLQS": "true", "RLQS_UNMATCHED": "maybe"}, err: "RLQS_UNMATCHED"},
		{name: "sub-second period", args: []string{"--rlqs", "--rlqs-report-period", "500ms"}, err: "--rlqs-report-period"},
		{name: "short TTL", args: []string{"--rlqs", "--rlqs-ttl-periods", "1.5"}, err: "--rlqs-ttl-periods"},
		{name: "bad replica", args: []string{"--rlqs", "--rlqs-replica", "a/b"}, err: "--rlqs-replica"},
		{name: "sub-second keepalive", args: []string{"--rlqs", "--rlqs-keepalive-time", "500ms"}, err: "--rlqs-keepalive-time"},
		{name: "no keepalive timeout", args: []string{"--rlqs", "--rlqs-keepalive-timeout", "0s"}, err: "--rlqs-keepalive-timeout"},
		{name: "bounds", args: []string{"--rlqs", "--rlqs-max-buckets-per-stream", "0", "--rlqs-max-buckets", "7", "--rlqs-max-streams", "9"},
			check: func(t *testing.T, o rlqs.Options) {
				if o.MaxBucketsPerStream >= 0 || o.MaxBuckets != 7 || o.MaxStreams != 9 {
					t.Errorf("bounds = %d, %d, %d, want none, 7, 9", o.MaxBucketsPerStream, o.MaxBuckets, o.MaxStreams)
				}
			}},
		{name: "negative bound", args: []string{"--rlqs", "--rlqs-max-streams", "-1"}, err: "--rlqs-max-streams"},
		{name: "tiny reports", args: []string{"--rlqs", "--rlqs-max-report-bytes", "100"}, err: "--rlqs-max-report-bytes"},
		{name: "demand exchanges' own Redis budget", args: []string{"--rlqs", "--rlqs-store-timeout", "200ms", "--rlqs-redis-pool-size", "3"},
			check: func(t *testing.T, o rlqs.Options) {
				if o.StoreTimeout != 200*time.Millisecond {
					t.Errorf("store timeout = %v", o.StoreTimeout)
				}
			}},
		{name: "no store timeout", args: []string{"--rlqs", "--rlqs-store-timeout", "0s"}, err: "--rlqs-store-timeout"},
		{name: "negative pool", args: []string{"--rlqs", "--rlqs-redis-pool-size", "-1"}, err: "--rlqs-redis-pool-size"},
		{name: "identity without client CA", args: []string{"--rlqs", "--rlqs-require-client-identity"}, err: "--rlqs-require-client-identity"},
		{name: "own listener without rlqs", args: []string{"--rlqs-addr", ":8082"}, err: "--rlqs-addr"},
		{name: "process without rlqs", args: []string{"--rlqs-process"}, err: "--rlqs-process"},
		{name: "process without its listener", args: []string{"--rlqs", "--rlqs-process"}, err: "--rlqs-addr"},
		{name: "process", env: map[string]string{"RLQS": "true", "RLQS_ADDR": ":8082", "RLQS_PROCESS": "true", "RLQS_NICE": "10"}},
		{name: "nice above 19", args: []string{"--rlqs", "--rlqs-addr", ":8082", "--rlqs-process", "--rlqs-nice", "20"}, err: "--rlqs-nice"},
		{name: "negative nice", args: []string{"--rlqs", "--rlqs-nice", "-5"}, err: "--rlqs-nice"},
		{name: "off by default skips checks", args: []string{"--rlqs-unmatched", "maybe"}},
		{name: "off skips checks", args: []string{"--rlqs=false", "--rlqs-unmatched", "maybe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("test", tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Validate()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Validate() = %v, want an error naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !s.RLQS.Enabled {
				if len(tc.args) > 0 && tc.args[0] == "--rlqs" || tc.env["RLQS"] == "true" {
					t.Fatal("--rlqs did not turn the service on")
				}
				return
			}
			o, err := s.RLQS.Options(s.OnStoreError)
			if err != nil {
				t.Fatal(err)
			}
			if o.OnStoreError != tc.policy {
				t.Errorf("policy = %v, want %v", o.OnStoreError, tc.policy)
			}
			if tc.check != nil {
				tc.check(t, o)
			}
		})
	}
}

// TestAsRLQSChild: the child of --rlqs-process keeps RLQS's settings and
// drops every listener, report and tracker of the parent's, and its drain.
func TestAsRLQSChild(t *testing.T) {
	env := map[string]string{"USE_PROMETHEUS": "true", "USE_STATSD": "true"}
	s, err := Parse("test", []string{"--rlqs", "--rlqs-addr", ":8082", "--rlqs-process", "--rlqs-nice", "12",
		"--admin-addr", "127.0.0.1:6070", "--metrics-addr", "127.0.0.1:6071", "--drain", "5s", "--top-keys", "10"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s.AsRLQSChild()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if !s.RLQS.Child || !s.RLQS.Enabled || s.RLQS.Addr != ":8082" || s.RLQS.Nice != 12 {
		t.Errorf("RLQS = %+v", s.RLQS)
	}
	if !s.Admin.Off() || !s.Admin.MetricsOff() || s.RefStats.Prometheus || s.RefStats.Statsd || !s.RefStats.StatsOff ||
		s.Top.Keys != 0 || s.Drain != 0 {
		t.Errorf("the child keeps the parent's admin %+v, stats %+v, top %d or drain %v", s.Admin, s.RefStats, s.Top.Keys, s.Drain)
	}
}
