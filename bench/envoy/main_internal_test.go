package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("FASTLIMIT_ENVOY_BIN", "/bin/envoy")
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.rounds != 3 || o.duration != 10*time.Second || len(o.rates) != 2 || len(o.conns) != 1 || o.envoy != "/bin/envoy" {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	o, err = parseFlags([]string{"--quick", "--rates", "5"}, io.Discard)
	if err != nil || o.rounds != 1 || o.duration != 2*time.Second || o.rates[0] != 200 || o.conns[0] != 4 {
		t.Fatalf("--quick: %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"--rates", "x"}, {"--rates", "", "--conns", ""}, {"--rounds", "0"}, {"extra"}, {"--conns", "-1"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	t.Setenv("FASTLIMIT_ENVOY_BIN", "")
	if _, err := parseFlags(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "FASTLIMIT_ENVOY_BIN") {
		t.Errorf("without Envoy: %v", err)
	}
}

func TestQuantile(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		if got := quantile(lat, q); got != want {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if quantile(nil, 0.5) != 0 {
		t.Error("quantile of nothing")
	}
}

func TestReplaceSection(t *testing.T) {
	got, err := replaceSection("# Benchmarks\n", "new\n")
	if err != nil || got != "# Benchmarks\n\n"+beginMarker+"\n\nnew\n\n"+endMarker+"\n" {
		t.Fatalf("append: %q, %v", got, err)
	}
	again, err := replaceSection(got+"after\n", "newer")
	if err != nil || again != "# Benchmarks\n\n"+beginMarker+"\n\nnewer\n\n"+endMarker+"\nafter\n" {
		t.Fatalf("replace: %q, %v", again, err)
	}
	for _, bad := range []string{beginMarker, endMarker + beginMarker, beginMarker + beginMarker + endMarker} {
		if _, err := replaceSection(bad, "x"); !errors.Is(err, ErrMarkers) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestRender checks the added latency (over the setup without a filter in
// the same round), the medians and ranges, and the columns each setup has.
func TestRender(t *testing.T) {
	l := load{rate: 100}
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	res := &results{setups: []string{noFilter, fastlimitRedis}, loads: []load{l}, rounds: 2,
		o: &options{timeout: 100 * time.Millisecond, users: 10, duration: time.Second},
		runs: map[string][]measurement{
			key(l, noFilter): {{sample: sample{ok: 100, elapsed: time.Second, latencies: ms(1, 1, 1)}, cpu: usage{envoy: 10 * time.Millisecond}},
				{sample: sample{ok: 100, elapsed: time.Second, latencies: ms(2, 2, 2)}, cpu: usage{envoy: 10 * time.Millisecond}}},
			key(l, fastlimitRedis): {{sample: sample{ok: 100, elapsed: time.Second, latencies: ms(4, 4, 4)}, cpu: usage{envoy: 20 * time.Millisecond, server: 5 * time.Millisecond, redis: 2 * time.Millisecond}},
				{sample: sample{ok: 50, failed: 1, elapsed: time.Second, latencies: ms(3, 3, 3)}, cpu: usage{envoy: 20 * time.Millisecond, server: 5 * time.Millisecond, redis: 2 * time.Millisecond}}},
		}}
	out := render(res)
	for _, want := range []string{
		"### open loop 100/s",
		"| no filter | 100 | 2.00 ms (1.00 ms–2.00 ms) | 2.00 ms (1.00 ms–2.00 ms) | – | – | 100 | – | – | 0 |",
		"| FastLimit (Redis) | 100 (50–100) | 4.00 ms (3.00 ms–4.00 ms) | 4.00 ms (3.00 ms–4.00 ms) | 3.00 ms (1.00 ms–3.00 ms) | 3.00 ms (1.00 ms–3.00 ms) | 400 (200–400) | 100 (50–100) | 40 (20–40) | 1 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}

// TestLoads runs both loops against a plain server: the open loop sends
// exactly rate × duration requests, the closed one keeps its connections
// busy; each request carries an x-user in turn.
func TestLoads(t *testing.T) {
	users := map[string]int{}
	done := make(chan string, 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done <- r.Header.Get("x-user")
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	c := newClient(strings.TrimPrefix(srv.URL, "http://"), 3)
	s := c.run(context.Background(), load{rate: 200}, 500*time.Millisecond)
	if s.ok != 100 || s.failed != 0 || len(s.latencies) != 100 || s.elapsed < 490*time.Millisecond {
		t.Errorf("open loop 200/s for 0.5s: %d ok, %d failed, %v", s.ok, s.failed, s.elapsed)
	}
	for range 100 {
		users[<-done]++
	}
	if len(users) != 3 || users["u0"] < 33 {
		t.Errorf("x-user values: %v", users)
	}
	go func() {
		for range done {
		}
	}()
	s = c.run(context.Background(), load{conns: 2}, 200*time.Millisecond)
	if s.ok == 0 || s.failed != 0 || s.elapsed < 200*time.Millisecond {
		t.Errorf("closed loop: %d ok, %d failed, %v", s.ok, s.failed, s.elapsed)
	}
}

// TestBootstrapValidates runs `envoy --mode validate` on both kinds of
// bootstrap the benchmark writes.
func TestBootstrapValidates(t *testing.T) {
	envoytest.Bin(t)
	for _, rls := range []string{"", "127.0.0.1:3"} {
		path := filepath.Join(t.TempDir(), "envoy.yaml")
		if err := os.WriteFile(path, []byte(bootstrap("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:4", rls, 100*time.Millisecond)), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := envoytest.Validate(t, path); err != nil {
			t.Errorf("rls %q: %v\n%s", rls, err, out)
		}
	}
}
