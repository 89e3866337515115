package descriptors_test

import (
	"reflect"
	"testing"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// TestLimitLevels checks that a limit knows each configured level of its
// path, with its flags.
func TestLimitLevels(t *testing.T) {
	lim := &descriptors.Limit{Unit: descriptors.Minute, RequestsPerUnit: 1}
	s, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: []descriptors.Descriptor{{
		Key: "route", ValueToMetric: true,
		Descriptors: []descriptors.Descriptor{{
			Key: "path", Value: "api*", ShareThreshold: true,
			Descriptors: []descriptors.Descriptor{{Key: "m", Value: "GET", Limit: lim}},
		}},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []descriptors.Level{
		{Key: "route", ValueToMetric: true},
		{Key: "path", Value: "api*", ShareThreshold: true},
		{Key: "m", Value: "GET"},
	}
	got := s.Limits()[0]
	if !reflect.DeepEqual(got.Levels, want) || got.Path != "d.route.path_api*.m_GET" {
		t.Errorf("levels %+v path %q, want %+v", got.Levels, got.Path, want)
	}
}
