package statsd_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTimersAndGauges: a timer's values go as one "|ms" line each and are
// sent once; gauges go at every flush, set by the store's generators
// first, as gostats' StatGenerators set them.
func TestTimersAndGauges(t *testing.T) {
	srv, st, c := newUDPClient(t)
	timer := st.Timer("ratelimit_server.ShouldRateLimit.response_time")
	for _, ms := range []uint64{0, 3, 12} {
		timer.Add(ms)
	}
	gauge := st.Gauge("ratelimit.go.numGoroutine")
	gens := 0
	st.AddGenerator(func() { gens++; gauge.Set(uint64(40 + gens)) })
	ctx := context.Background()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := take(t, srv.lines, 4)
	want := []string{"ratelimit.go.numGoroutine:41|g", "ratelimit_server.ShouldRateLimit.response_time:0|ms",
		"ratelimit_server.ShouldRateLimit.response_time:12|ms", "ratelimit_server.ShouldRateLimit.response_time:3|ms"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines %q, want %q", got, want)
	}
	for _, l := range got {
		parse(t, l) // each is a well-formed statsd line
	}
	// The timer's values went; the gauge goes again, regenerated.
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := take(t, srv.lines, 1); got[0] != "ratelimit.go.numGoroutine:42|g" {
		t.Errorf("second flush %q", got)
	}
	srv.none(t, "second flush also sent %q")
}

// TestTimerSampling: past the values a timer keeps between flushes, it
// sends a uniform sample with its rate, so that a statsd server counts
// every value.
func TestTimerSampling(t *testing.T) {
	srv, st, c := newUDPClient(t)
	timer := st.Timer("t")
	const kept, added = 4096, 4096 * 4
	for i := range added {
		timer.Add(uint64(i % 100))
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	lines := take(t, srv.lines, kept)
	var sum uint64
	for _, l := range lines {
		v, rate, ok := strings.Cut(strings.TrimPrefix(l, "t:"), "|ms|@")
		if !ok || rate != "0.25" {
			t.Fatalf("line %q, want t:<ms>|ms|@0.25", l)
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n >= 100 {
			t.Fatalf("line %q: value not one added", l)
		}
		sum += n
	}
	// The values added average 49.5; a uniform sample of 4096 of them
	// averages within a few units of it (the standard error is 0.45).
	if mean := float64(sum) / kept; mean < 45 || mean > 54 {
		t.Errorf("sample mean %.2f, want about 49.5", mean)
	}
	select {
	case l := <-srv.lines:
		t.Errorf("more than %d lines: %q", kept, l)
	case <-time.After(100 * time.Millisecond):
	}
}
