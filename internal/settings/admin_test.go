package settings

import (
	"io"
	"strings"
	"testing"
)

// TestAdminFlags: the top identifiers' and the admin authorization's
// flags are checked, each error naming its flag.
func TestAdminFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{[]string{"--top-keys", "0"}, ""},
		{[]string{"--top-keys", "-1"}, "--top-keys"},
		{[]string{"--top-window", "0s"}, "--top-window"},
		{[]string{"--admin-tls-cert", "c.pem"}, "--admin-tls-cert"},
		{[]string{"--admin-tls-key", "k.pem"}, "--admin-tls-cert"},
		{[]string{"--admin-tls-client-ca", "ca.pem"}, "--admin-tls-client-ca"},
		{[]string{"--admin-tls-cert", "c.pem", "--admin-tls-key", "k.pem", "--admin-tls-client-ca", "ca.pem", "--admin-token-file", "t"}, ""},
		{[]string{"--metrics-addr", "0.0.0.0:6071"}, ""},
		{[]string{"--metrics-addr", "127.0.0.1:6070"}, "--metrics-addr"},
		{[]string{"--metrics-addr", "127.0.0.1:6070", "--admin-addr", "off"}, ""},
		{[]string{"--admin-allowed-hosts", "rl-admin.limits.svc, rl-admin.limits"}, ""},
		{[]string{"--admin-allowed-hosts", "http://rl-admin"}, "--admin-allowed-hosts"},
	} {
		o, err := Parse("test", tc.args, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		err = o.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}

// TestAdminHostNames: --admin-allowed-hosts and --admin-addr's host when
// it is a name, in lower case, without a trailing dot.
func TestAdminHostNames(t *testing.T) {
	for _, tc := range []struct {
		addr, allowed string
		want          []string
	}{
		{"127.0.0.1:6070", "", nil},
		{"0.0.0.0:6070", "A.example., b", []string{"a.example", "b"}},
		{"Admin.Local:6070", "", []string{"admin.local"}},
		{"[::1]:6070", " x ,, ", []string{"x"}},
		{":6070", "", nil},
	} {
		a := Admin{Addr: tc.addr, AllowedHosts: tc.allowed}
		if got := a.HostNames(); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s, %q: %q, want %q", tc.addr, tc.allowed, got, tc.want)
		}
	}
}
