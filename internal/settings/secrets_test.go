package settings_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/settings"
)

func TestMaskArgs(t *testing.T) {
	cases := []struct {
		name     string
		in, want []string
	}{
		{"flag and value", []string{"--redis-password", "S3CR3T"}, []string{"--redis-password", "xxxxx"}},
		{"flag=value", []string{"--redis-password=S3CR3T"}, []string{"--redis-password=xxxxx"}},
		{"one dash", []string{"-redis-sentinel-password", "S3CR3T", "-redis-password=S3CR3T"},
			[]string{"-redis-sentinel-password", "xxxxx", "-redis-password=xxxxx"}},
		{"deprecated auth", []string{"--redis-auth=alice:S3CR3T"}, []string{"--redis-auth=xxxxx"}},
		{"xds headers", []string{"--xds-headers", "authorization:Bearer S3CR3T"}, []string{"--xds-headers", "xxxxx"}},
		{"alias", []string{"--config-grpc-xds-client-additional-headers=authorization:Bearer S3CR3T"},
			[]string{"--config-grpc-xds-client-additional-headers=xxxxx"}},
		{"a value like a flag", []string{"--redis-password", "--pprof", "--pprof"}, []string{"--redis-password", "xxxxx", "--pprof"}},
		{"empty", []string{"--redis-password=", "--redis-password", ""}, []string{"--redis-password=", "--redis-password", ""}},
		{"last", []string{"--redis-password"}, []string{"--redis-password"}},
		{"url", []string{"--redis-url", "redis://alice:S3CR3T@h:6379/0"}, []string{"--redis-url", "redis://alice:xxxxx@h:6379/0"}},
		{"url=", []string{"--redis-url=rediss://:S3CR3T%40x@h:1"}, []string{"--redis-url=rediss://:xxxxx@h:1"}},
		{"unparsable url", []string{"--redis-url=redis://:S3#CR3T@h:1"}, []string{"--redis-url=redis://:xxxxx@h:1"}},
		{"address list", []string{"--redis-url=alice:S3CR3T@h1:1,h2:2,alice:S3CR3T@h3:3"},
			[]string{"--redis-url=xxxxx@h1:1,h2:2,xxxxx@h3:3"}},
		{"any argument", []string{"--xds-server", "http://u:S3CR3T@h:1", "x=http://u:S3CR3T@h"},
			[]string{"--xds-server", "http://u:xxxxx@h:1", "x=http://u:xxxxx@h"}},
		{"not secret", []string{"/bin/fastlimit", "--redis-username", "alice", "--redis-tls-key", "/etc/k.pem", "--admin-addr=127.0.0.1:6070",
			"--pprof", "--redis-url", "redis://alice@h:1", "-", "--"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			want := tc.want
			if want == nil {
				want = tc.in
			}
			got := settings.MaskArgs(in)
			if !slices.Equal(got, want) {
				t.Errorf("MaskArgs(%q)\n = %q\nwant %q", tc.in, got, want)
			}
			if strings.Contains(strings.Join(got, " "), "S3CR3T") {
				t.Errorf("MaskArgs(%q) shows the secret: %q", tc.in, got)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("MaskArgs changed its argument: %q", in)
			}
		})
	}
}
