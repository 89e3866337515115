package admin

import (
	"reflect"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// TestParseQuery: /v1/usage's and /v1/quota's parameters, each given
// once, their entries percent-decoded after splitting.
func TestParseQuery(t *testing.T) {
	cases := []struct {
		raw  string
		want []descriptors.Entry
	}{
		{"domain=d&descriptor=k=v", []descriptors.Entry{{Key: "k", Value: "v"}}},
		{"domain=d&descriptor=k=v,k2=v2", []descriptors.Entry{{Key: "k", Value: "v"}, {Key: "k2", Value: "v2"}}},
		{"descriptor=k=&domain=d", []descriptors.Entry{{Key: "k", Value: ""}}},
		{"domain=d&descriptor=k=a%2Cb%3Dc,x%3Dy=1+2", []descriptors.Entry{{Key: "k", Value: "a,b=c"}, {Key: "x=y", Value: "1 2"}}},
		{"domain=d&descriptor=k=a=b", []descriptors.Entry{{Key: "k", Value: "a=b"}}},
		{"domain=d&bucket=k=v&descriptor=x=y", []descriptors.Entry{{Key: "x", Value: "y"}}},
	}
	for _, tc := range cases {
		domain, got, err := parseQuery(tc.raw, "descriptor")
		if err != nil || domain != "d" || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseQuery(%q) = %q, %v, %v; want d, %v", tc.raw, domain, got, err, tc.want)
		}
	}
	for _, raw := range []string{
		"bucket=k=v",
		"domain=d",
		"domain=d&bucket=",
		"domain=d&bucket=k",
		"domain=d&bucket=k=%zz",
		"domain=d&bucket=k=v&bucket=k=w",
		"domain=d&domain=e&bucket=k=v",
		"domain=%zz&bucket=k=v",
	} {
		if _, _, err := parseQuery(raw, "bucket"); err == nil {
			t.Errorf("parseQuery(%q): no error", raw)
		}
	}
}
