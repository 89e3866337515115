package rls_test

import (
	"reflect"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rls"
)

// TestParseRequest: a /json body becomes the limiter request ShouldRateLimit
// would decide: entries, overrides, hits and refunds; a bad body is an error.
func TestParseRequest(t *testing.T) {
	got, err := rls.ParseRequest([]byte(`{"domain":"d","hits_addend":2,"descriptors":[
		{"entries":[{"key":"a","value":"1"},{"key":"b","value":"2"}],"limit":{"requests_per_unit":7,"unit":"MINUTE"}},
		{"entries":[{"key":"c","value":"3"}],"hitsAddend":5,"isNegativeHits":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &limiter.Request[descriptors.Entry]{Domain: "d", HitsAddend: 2, Descriptors: []limiter.Descriptor[descriptors.Entry]{
		{Entries: []descriptors.Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}},
			Override: &limiter.Override{RequestsPerUnit: 7, Unit: descriptors.Minute}},
		{Entries: []descriptors.Entry{{Key: "c", Value: "3"}}, Hits: 5, HasHits: true, Refund: true},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseRequest:\n got %+v\nwant %+v", got, want)
	}
	if _, err := rls.ParseRequest([]byte(`{"domain":"d","nope":1}`)); err == nil {
		t.Error("an unknown field was accepted")
	}
}
