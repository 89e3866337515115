package settings

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/rlqs"
)

func TestRLQSSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		err    string // in Validate's error; "" for none
		policy rlqs.StorePolicy
		check  func(t *testing.T, o rlqs.Options)
	}{
		{name: "defaults", policy: rlqs.StoreKeep, check: func(t *testing.T, o rlqs.Options) {
			if o.ReportPeriod != 5*time.Second || o.TTLPeriods != 3 || o.IdleAfter != 10*time.Minute || o.Unmatched != rlqs.UnmatchedAllow {
				t.Errorf("options = %+v", o)
			}
		}},
		{name: "follows --on-store-error allow", args: []string{"--on-store-error", "allow"}, policy: rlqs.StoreAllow},
		{name: "follows --on-store-error deny", args: []string{"--on-store-error", "deny"}, policy: rlqs.StoreDeny},
		{name: "its own policy wins", args: []string{"--on-store-error", "deny", "--rlqs-on-store-error", "split"}, policy: rlqs.StoreSplit},
		{name: "environment twins", env: map[string]string{"RLQS_ON_STORE_ERROR": "allow", "RLQS_UNMATCHED": "deny",
			"RLQS_IDLE_AFTER": "0", "RLQS_REPORT_PERIOD": "1s", "RLQS_REPLICA": "pod-1"}, policy: rlqs.StoreAllow,
			check: func(t *testing.T, o rlqs.Options) {
				if o.Unmatched != rlqs.UnmatchedDeny || o.IdleAfter >= 0 || o.ReportPeriod != time.Second || o.Replica != "pod-1" {
					t.Errorf("options = %+v", o)
				}
			}},
		{name: "bad policy", args: []string{"--rlqs-on-store-error", "error"}, err: "--rlqs-on-store-error"},
		{name: "bad unmatched", env: map[string]string{"RLQS_UNMATCHED": "maybe"}, err: "RLQS_UNMATCHED"},
		{name: "sub-second period", args: []string{"--rlqs-report-period", "500ms"}, err: "--rlqs-report-period"},
		{name: "short TTL", args: []string{"--rlqs-ttl-periods", "1.5"}, err: "--rlqs-ttl-periods"},
		{name: "bad replica", args: []string{"--rlqs-replica", "a/b"}, err: "--rlqs-replica"},
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
