package rls

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/testing/refserver"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// metadataService returns a service with dynamic metadata over
// refserver.MetadataRules in a global mode ("", "shadow" or "quota"), and
// its rules.
func metadataService(t *testing.T, mode string) (*Service, *rules.Loaded) {
	t.Helper()
	rs, err := rules.Parse(map[string][]byte{"metadata.yaml": refserver.MetadataRules})
	if err != nil {
		t.Fatal(err)
	}
	st := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { _ = st.Close() })
	l := limiter.New(st, limiter.Options{QuotaMode: mode == "quota"})
	l.SetRules(rs.Set)
	h := HeaderOptions{ResponseHeaders: HeadersOff, DynamicMetadata: true}
	return New(l, Options{Headers: h, ShadowMode: mode == "shadow"}, zaptest.NewLogger(t)), rs
}

// TestDynamicMetadata decides refserver's table, the dynamic metadata that
// envoyproxy/ratelimit's main builds (read from its code), in order on one
// service per global mode; then the rules' metadata is still as loaded.
func TestDynamicMetadata(t *testing.T) {
	services := map[string]*Service{}
	var loaded []*rules.Loaded
	for _, c := range refserver.MetadataCases(t) {
		s := services[c.Mode]
		if s == nil {
			var rs *rules.Loaded
			s, rs = metadataService(t, c.Mode)
			services[c.Mode], loaded = s, append(loaded, rs)
		}
		resp, err := s.ShouldRateLimit(context.Background(), c.Request)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if err := c.Check(resp); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
	_, fresh := metadataService(t, "")
	for _, rs := range loaded {
		for i, l := range rs.Set.Limits() {
			if want := fresh.Set.Limits()[i].Metadata; !reflect.DeepEqual(l.Metadata, want) {
				t.Errorf("rule %s: metadata %v after the requests, loaded as %v", l.Path, l.Metadata, want)
			}
		}
	}
}

// TestDynamicMetadataConcurrent merges the same rules' nested metadata
// from many goroutines (the race detector watches) and finds the rules as
// loaded.
func TestDynamicMetadataConcurrent(t *testing.T) {
	s, rs := metadataService(t, "")
	c := refserver.MetadataCases(t)[0] // nested structs of two rules merged
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				resp, err := s.ShouldRateLimit(context.Background(), c.Request)
				if err != nil {
					t.Error(err)
					return
				}
				if err := c.Check(resp); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	_, fresh := metadataService(t, "")
	for i, l := range rs.Set.Limits() {
		if want := fresh.Set.Limits()[i].Metadata; !reflect.DeepEqual(l.Metadata, want) {
			t.Errorf("rule %s: metadata %v, loaded as %v", l.Path, l.Metadata, want)
		}
	}
}

// TestNoDynamicMetadataWhenOff: without the option an answer has none.
func TestNoDynamicMetadataWhenOff(t *testing.T) {
	s, _ := metadataService(t, "")
	s.o.Headers.DynamicMetadata = false
	resp, err := s.ShouldRateLimit(context.Background(), refserver.MetadataCases(t)[0].Request)
	if err != nil || resp.GetDynamicMetadata() != nil {
		t.Fatalf("%v, %v: want no dynamic metadata", resp.GetDynamicMetadata(), err)
	}
}
