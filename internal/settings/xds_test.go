package settings

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/source/xds"
)

// xdsEnv parses settings from environment variables only.
func xdsEnv(t *testing.T, env map[string]string) (*Settings, error) {
	t.Helper()
	o, err := Parse("test", nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		return o, err
	}
	return o, o.Validate()
}

func TestXDSOptionDefaults(t *testing.T) {
	o, err := xdsEnv(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := XDS{
		ConfigType: "FILE", NodeID: "default", Server: "localhost:18000",
		Backoff:              xds.Backoff{Initial: 10 * time.Second, Max: 60 * time.Second, Factor: 0.5, Jitter: true},
		ConnectRetryInterval: 3 * time.Second,
	}
	if !reflect.DeepEqual(o.XDS, want) {
		t.Errorf("defaults\n got %+v\nwant %+v", o.XDS, want)
	}
	if o.XDS.Enabled() {
		t.Error("xDS enabled by default")
	}
}

// TestXDSOptionEnvNames checks that each xDS flag's environment twin is
// envoyproxy/ratelimit's variable.
func TestXDSOptionEnvNames(t *testing.T) {
	ref := []string{
		"CONFIG_TYPE", "FORCE_START_WITHOUT_INITIAL_CONFIG",
		"CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
	}
	fs := newFlagSet("test", &Settings{}, io.Discard)
	for _, name := range ref {
		flagName := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		if fs.Lookup(flagName) == nil {
			t.Errorf("%s: no flag --%s", name, flagName)
		}
	}
}

func TestXDSOptionErrors(t *testing.T) {
	xdsOn := func(kv ...string) map[string]string {
		env := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	cases := []struct {
		name string
		env  map[string]string
		want []string // each must be in the error
	}{
		{"unknown config type", map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"}, []string{"CONFIG_TYPE", "--config-type", "GRPC_XDS_DELTA"}},
		{"header without colon", xdsOn("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "a:b,nocolon"),
			[]string{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "entry 2 "}},
		{"header without name", xdsOn("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ":v"), []string{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"}},
		{"header bad name", xdsOn("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "a b:v"), []string{"not a valid header name"}},
		{"header token without colon", xdsOn("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "Bearer s3cret"), []string{"entry 1 "}},
		{"server url with credentials", xdsOn("CONFIG_GRPC_XDS_SERVER_URL", "http://u:s3cret@h:1"),
			[]string{"CONFIG_GRPC_XDS_SERVER_URL", `"http://u:xxxxx@h:1"`, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"}},
		{"server address with credentials", xdsOn("CONFIG_GRPC_XDS_SERVER_URL", "u:s3cret@h:1"), []string{`"xxxxx@h:1"`}},
		{"zero backoff", xdsOn("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "0s"), []string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"}},
		{"zero max backoff", xdsOn("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "-1s"), []string{"XDS_CLIENT_BACKOFF_MAX_INTERVAL"}},
		{"zero factor", xdsOn("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0"), []string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR"}},
		{"zero connect retry", xdsOn("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "0s"), []string{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"}},
		{"negative message size", xdsOn("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "-1"), []string{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"}},
		{"bad duration", xdsOn("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "soon"), []string{"XDS_CLIENT_BACKOFF_MAX_INTERVAL"}},
		{"bad bool", xdsOn("FORCE_START_WITHOUT_INITIAL_CONFIG", "maybe"), []string{"FORCE_START_WITHOUT_INITIAL_CONFIG"}},
		{"blank server url", xdsOn("CONFIG_GRPC_XDS_SERVER_URL", " "), []string{"CONFIG_GRPC_XDS_SERVER_URL"}},
		{"missing CA file", xdsOn("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/nonexistent/ca.pem"),
			[]string{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/nonexistent/ca.pem"}},
		{"cert without key", xdsOn("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/tmp/c.pem"),
			[]string{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "both"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := xdsEnv(t, tc.env)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the secret", err)
			}
		})
	}
	// A unix socket's path may hold a '@'.
	if _, err := xdsEnv(t, xdsOn("CONFIG_GRPC_XDS_SERVER_URL", "unix:/run/app@1/xds.sock")); err != nil {
		t.Errorf("unix target with '@': %v", err)
	}
	// TLS settings are not read when TLS is off, and xDS settings not at
	// all with FILE.
	if _, err := xdsEnv(t, xdsOn("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/nonexistent")); err != nil {
		t.Errorf("TLS file read without TLS: %v", err)
	}
	if _, err := xdsEnv(t, map[string]string{"CONFIG_TYPE": "file", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0"}); err != nil {
		t.Errorf("xDS settings checked with FILE: %v", err)
	}
}

func TestParseNodeMetadata(t *testing.T) {
	cases := []struct {
		in      string
		want    map[string]string
		ignored []string
	}{
		{"", map[string]string{}, nil},
		{"a=1", map[string]string{"a": "1"}, nil},
		{"a=1,b=2", map[string]string{"a": "1", "b": "2"}, nil},
		{"a=x=y", map[string]string{"a": "x=y"}, nil},
		{"a=", map[string]string{"a": ""}, nil},
		{"a:1,b=2", map[string]string{"b": "2"}, []string{"a:1"}},
		{"a=1,,b=2", map[string]string{"a": "1", "b": "2"}, []string{""}},
		{"a=1,a=2", map[string]string{"a": "2"}, nil},
	}
	for _, tc := range cases {
		got, ignored := ParseNodeMetadata(tc.in)
		if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(ignored, tc.ignored) {
			t.Errorf("ParseNodeMetadata(%q) = %v, %q; want %v, %q", tc.in, got, ignored, tc.want, tc.ignored)
		}
	}
}

func TestParseXDSHeaders(t *testing.T) {
	cases := []struct {
		in   string
		want map[string]string
		err  bool
	}{
		{"", nil, false},
		{"a:1", map[string]string{"a": "1"}, false},
		{"X-Token:abc,x-b:2", map[string]string{"x-token": "abc", "x-b": "2"}, false},
		{"authorization:Basic dXNlcjpwYXNz:x", map[string]string{"authorization": "Basic dXNlcjpwYXNz:x"}, false},
		{" a :1", map[string]string{"a": "1"}, false},
		{"a", nil, true},
		{"a:1,", nil, true},
		{":1", nil, true},
		{"a/b:1", nil, true},
	}
	for _, tc := range cases {
		got, err := ParseHeaders(tc.in)
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseHeaders(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// FuzzXDSEnvFormats proves that the header and node metadata formats
// never panic, and that accepted headers are valid gRPC metadata names.
func FuzzXDSEnvFormats(f *testing.F) {
	for _, s := range []string{"", "a:1", "a=1,b=2", "x-y:Bearer a:b,k:v", ":", "=", ",,", " a :b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if h, err := ParseHeaders(s); err == nil {
			for k := range h {
				if k == "" || strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
					t.Fatalf("header name %q accepted from %q", k, s)
				}
			}
		}
		md, ignored := ParseNodeMetadata(s)
		if s != "" && len(md)+len(ignored) == 0 {
			t.Fatalf("%q: no entry kept or ignored", s)
		}
	})
}

// TestRulesOverlay: RULES_OVERLAY is --rules-overlay's twin, in the rules
// layout; it applies to rules over xDS, and with rules files it stops the
// start.
func TestRulesOverlay(t *testing.T) {
	o, err := xdsEnv(t, map[string]string{"RULES_OVERLAY": "/etc/overlay.yaml", "CONFIG_TYPE": "GRPC_XDS_SOTW"})
	if err != nil || o.Rules().Overlay != "/etc/overlay.yaml" {
		t.Fatalf("overlay %q, %v", o.Rules().Overlay, err)
	}
	_, err = xdsEnv(t, map[string]string{"RULES_OVERLAY": "/etc/overlay.yaml"})
	if want := "RULES_OVERLAY: applies to rules over xDS (--config-type GRPC_XDS_SOTW)"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("with rules files: %v, want %q", err, want)
	}
}
