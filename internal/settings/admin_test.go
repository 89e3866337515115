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
