package rlqs

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// TestResolveGroup: a bucket whose rule has several limits is divided as
// the least rate and the least burst among them; a limit of 0 among them
// denies all.
func TestResolveGroup(t *testing.T) {
	set, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: []descriptors.Descriptor{
		{Key: "plan", Limits: []*descriptors.Limit{
			{Unit: descriptors.Second, RequestsPerUnit: 10},
			{Unit: descriptors.Day, RequestsPerUnit: 1000},
			{Algorithm: descriptors.TokenBucket, Unit: descriptors.Minute, RequestsPerUnit: 60, Burst: 5 * descriptors.Milli},
		}},
		{Key: "closed", Limits: []*descriptors.Limit{
			{Unit: descriptors.Second, RequestsPerUnit: 10},
			{Unit: descriptors.Day, RequestsPerUnit: 0},
		}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	r := &resolver{prefix: "rl"}
	res := r.compute(set, "d", []descriptors.Entry{{Key: "plan", Value: "p"}})
	if res.kind != limited || math.Abs(res.global.Rate-1000.0/86400) > 1e-12 || res.global.Burst != 5 {
		t.Errorf("plan: %+v, want limited at 1000/day with a burst of 5", res)
	}
	if res.storeKey != "rl:{d/plan=p}:default:rlqs" {
		t.Errorf("plan: store key %q, the first limit's", res.storeKey)
	}
	if res := r.compute(set, "d", []descriptors.Entry{{Key: "closed", Value: "c"}}); res.kind != denyAll {
		t.Errorf("closed: %+v, want DENY_ALL", res)
	}
}

// TestResolverBytesBound: ids of 64 KiB values fill the cache's byte
// bound long before its entry bound; it never holds more than the bound
// and one entry.
func TestResolverBytesBound(t *testing.T) {
	set, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: []descriptors.Descriptor{
		{Key: "tenant", Limit: &descriptors.Limit{Unit: descriptors.Second, RequestsPerUnit: 10}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	r := resolver{prefix: "p"}
	long := strings.Repeat("x", 64<<10)
	most := 0
	for i := range 2 * maxResolvedBytes / len(long) {
		entries, text := canonical(map[string]string{"tenant": long + strconv.Itoa(i)})
		r.resolve(set, "d", entries, text)
		r.mu.Lock()
		most = max(most, r.bytes)
		if r.bytes > maxResolvedBytes+3*len(long)+1024 {
			t.Fatalf("after %d ids the cache holds %d bytes, bound %d", i+1, r.bytes, maxResolvedBytes)
		}
		r.mu.Unlock()
	}
	if most < maxResolvedBytes/2 {
		t.Errorf("the cache held at most %d bytes: entryBytes undercounts", most)
	}
}

// The default StoreLog writes each change of state once, whatever the
// observations between changes.
func TestChangeLogWritesChangesOnly(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	c := &changeLog{log: zap.New(core)}
	steps := []struct {
		down, changed bool
	}{{false, false}, {true, true}, {true, false}, {false, true}, {false, false}, {true, true}}
	for i, s := range steps {
		var changed bool
		if s.down {
			changed = c.Down("down")
		} else {
			changed = c.Up("up")
		}
		if changed != s.changed {
			t.Fatalf("step %d (down %v): changed %v, want %v", i, s.down, changed, s.changed)
		}
	}
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Level.String()+" "+e.Message)
	}
	want := []string{"warn down", "info up", "warn down"}
	if len(got) != len(want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("lines %q, want %q", got, want)
		}
	}
}

// lineBudget lets max lines through a second and tells the next line let
// through how many were held back.
func TestLineBudget(t *testing.T) {
	b := lineBudget{max: 2}
	at := func(ms int64) time.Time { return time.UnixMilli(1_900_000_000_000 + ms) }
	for i, s := range []struct {
		ms   int64
		ok   bool
		held int
	}{
		{0, true, 0}, {10, true, 0}, {20, false, 0}, {999, false, 0},
		{1000, true, 2}, {1001, true, 0}, {1002, false, 0}, {5000, true, 1},
	} {
		ok, held := b.take(at(s.ms))
		if ok != s.ok || held != s.held {
			t.Errorf("step %d at %d ms: (%v, %d), want (%v, %d)", i, s.ms, ok, held, s.ok, s.held)
		}
	}
}
