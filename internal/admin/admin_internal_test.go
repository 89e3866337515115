package admin

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

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

// TestRefusalLines: refusals of one reason write a line at most once per
// refusalEvery, the next counting those left out; reasons are apart.
func TestRefusalLines(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	now := time.Unix(1000, 0)
	l := newAuditLog(zap.New(core), func() time.Time { return now })
	r := httptest.NewRequest(http.MethodPost, "/v1/counters/reset", nil)
	for range 300 {
		l.refused(r, "unauthorized", errNotAuthorized)
	}
	l.refused(r, "host", errCrossSite)
	now = now.Add(refusalEvery - time.Millisecond)
	l.refused(r, "unauthorized", errNotAuthorized)
	now = now.Add(time.Millisecond)
	l.refused(r, "unauthorized", errNotAuthorized)
	var got []string
	for _, e := range logs.All() {
		got = append(got, fmt.Sprint(e.ContextMap()["reason"], " ", e.ContextMap()["suppressed"]))
	}
	if want := []string{"unauthorized 0", "host 0", "unauthorized 300"}; !reflect.DeepEqual(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
}

// TestDescriptorText: a descriptor in an audit line names its entries
// unambiguously: values quoted, keys too unless plain words.
func TestDescriptorText(t *testing.T) {
	for _, tc := range []struct {
		es   []Entry
		want string
	}{
		{[]Entry{{"user", "ann"}}, `user="ann"`},
		{[]Entry{{"user", "a,b=c"}, {"plan", ""}}, `user="a,b=c",plan=""`},
		{[]Entry{{"user", "ann\",plan=\"gold"}}, `user="ann\",plan=\"gold"`},
		{[]Entry{{"a=b", "\x1b[31m"}}, `"a=b"="\x1b[31m"`},
		{[]Entry{{"", "v"}}, `""="v"`},
	} {
		if got := descriptorText(tc.es); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.es, got, tc.want)
		}
	}
}
