package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/bench/load"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

func TestReplaceSection(t *testing.T) {
	const before = "# Benchmarks\n\nHand-written, kept.\n\n"
	const after = "\n\n## Failover\n\nAlso hand-written.\n"
	tests := []struct {
		name string
		doc  string
		want string
		err  bool
	}{
		{
			name: "replaces between the markers",
			doc:  before + beginMarker + "\nold figures\n" + endMarker + after,
			want: before + beginMarker + "\n\nNEW\n\n" + endMarker + after,
		},
		{
			name: "empty section",
			doc:  before + beginMarker + endMarker + after,
			want: before + beginMarker + "\n\nNEW\n\n" + endMarker + after,
		},
		{
			name: "no markers: appended",
			doc:  "# Benchmarks\nNo newline at the end",
			want: "# Benchmarks\nNo newline at the end\n\n" + beginMarker + "\n\nNEW\n\n" + endMarker + "\n",
		},
		{
			name: "empty doc",
			doc:  "",
			want: beginMarker + "\n\nNEW\n\n" + endMarker + "\n",
		},
		{name: "begin only", doc: before + beginMarker + after, err: true},
		{name: "end only", doc: before + endMarker + after, err: true},
		{name: "two sections", doc: beginMarker + endMarker + beginMarker + endMarker, err: true},
		{name: "end before begin", doc: endMarker + "\n" + beginMarker, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := replaceSection(tt.doc, "\nNEW\n")
			if tt.err {
				if !errors.Is(err, ErrMarkers) {
					t.Fatalf("got %q, %v; want an ErrMarkers", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v\nwant %q", got, err, tt.want)
			}
			// Running it again on its own output changes nothing.
			again, err := replaceSection(got, "NEW")
			if err != nil || again != got {
				t.Fatalf("second replacement: %q, %v", again, err)
			}
		})
	}
}

func TestWriteSection(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "BENCHMARKS.md")
	// A missing file is created with a title.
	if err := writeSection(path, "first"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := "# Benchmarks\n\n" + beginMarker + "\n\nfirst\n\n" + endMarker + "\n"; string(b) != want {
		t.Fatalf("created %q, want %q", b, want)
	}
	// Text around the markers survives; the mode is kept.
	doc := "intro\n" + beginMarker + "\nx\n" + endMarker + "\noutro\n"
	files.Write(t, path, doc)
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, "second"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if want := "intro\n" + beginMarker + "\n\nsecond\n\n" + endMarker + "\noutro\n"; string(b) != want {
		t.Fatalf("rewrote %q, want %q", b, want)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	// Broken markers leave the file as it was.
	broken := "intro\n" + beginMarker + "\n"
	files.Write(t, path, broken)
	if err := writeSection(path, "third"); !errors.Is(err, ErrMarkers) || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v, want an ErrMarkers naming the file", err)
	}
	if b, _ = os.ReadFile(path); string(b) != broken {
		t.Fatalf("file changed to %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

func TestFormats(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{fmtRate(9400, 12200), "9.4k–12.2k"},
		{fmtRate(850, 990), "850–990"},
		{fmtRate(12000, 12040), "12.0k"},
		{fmtRate(150000, 210000), "150–210k"},
		{fmtMicros(480, 610), "480–610 µs"},
		{fmtMicros(480, 1610), "0.48–1.61 ms"},
		{fmtMicros(13500, 17400), "13.5–17.4 ms"},
		{fmtMicros(150000, 150000), "150 ms"},
		{fmtCPU(68.2, 89.4), "68–89 µs"},
		{fmtCPU(5.21, 5.24), "5.2 µs"},
		{fmtRatio(1.6, 1.8), "1.60–1.80x"},
		{fmtPercent(0.87, 0.931), "87–93 %"},
		{fmtRange(nil, fmtRate), ""},
		{fmtRange([]float64{3, 1, 2}, fmtCount), "1–3"},
		{thousands(100000), "100,000"},
		{thousands(999), "999"},
		{thousands(1234567), "1,234,567"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// fake returns a sample of round with the given rate, p99 (µs), and
// server and Redis CPU per decision (µs), over 1 s.
func fake(round int, rate, p99, serverUS, redisUS float64) *sample {
	n := int64(rate)
	return &sample{
		Round: round,
		Report: &load.Report{
			Seconds: 1, OK: n, DecisionsPerSec: rate, CPUSeconds: 40e-6 * rate,
			Latency: load.Latency{P50: p99 / 4, P99: p99},
		},
		ServerCPU: serverUS * rate / 1e6,
		RedisCPU:  redisUS * rate / 1e6,
		Started:   time.Unix(int64(round), 0),
	}
}

// TestRenderPairsRounds checks that ratios are computed round by round,
// not from the ranges, and that every section shows what ran.
func TestRenderPairsRounds(t *testing.T) {
	fw := runSpec{Key: "fw", Descriptors: 1, Callers: 64}
	one := runSpec{Key: "fw", Descriptors: 1, Callers: 1}
	unl := runSpec{Key: "unlimited", Descriptors: 1, Callers: 64}
	sw := runSpec{Key: "sw", Descriptors: 1, Callers: 64}
	res := &results{
		Settings: settings{Command: "go run ./bench/rls --compare x", Rounds: 2, Duration: "1s", Warmup: "0s", Callers: 64, Conns: 4, Keys: 100000, Sweep: []int{1, 64}},
		Binaries: []binaryInfo{{Name: "FastLimit"}, {Name: "reference"}},
		Runs: []*runResult{
			{Spec: unl, Samples: [][]*sample{{fake(1, 20000, 9000, 40, 0), fake(2, 10000, 9000, 40, 0)}, {fake(1, 10000, 9000, 80, 0), fake(2, 10000, 9000, 80, 0)}}},
			// Round 1: 2x the rate; round 2: 0.5x. The ranges alone would say 0.5–4x.
			{Spec: fw, Samples: [][]*sample{{fake(1, 20000, 5000, 60, 7), fake(2, 5000, 8000, 60, 9)}, {fake(1, 10000, 20000, 130, 21), fake(2, 10000, 20000, 150, 27)}}},
			{Spec: sw, Samples: [][]*sample{{fake(1, 9000, 5000, 60, 12), fake(2, 9000, 5000, 60, 12)}, nil}},
			{Spec: one, Samples: [][]*sample{{fake(1, 2000, 2000, 200, 60), fake(2, 2000, 2000, 200, 60)}, {fake(1, 1000, 4000, 300, 80), fake(2, 1000, 4000, 300, 80)}}},
		},
	}
	md := render(res)
	for _, want := range []string{
		"| decisions/s, 1 descriptor | 5.0k–20.0k | 10.0k | 0.50–2.00x |",
		"| **Redis CPU per decision, 1 descriptor** | 7.0–9.0 µs | 21–27 µs | 0.33x |",
		"| decisions/s, sliding window, 1 descriptor | 9.0k | — | — |",
		"| decisions/s, `unlimited` | 10.0k–20.0k | 10.0k | 1.00–2.00x |",
		// Same-round share of unlimited: 20000/20000 and 5000/10000.
		"| FastLimit decisions/s, fixed window against `unlimited`, 64 callers, 1 descriptor (same round) | ≥ 85 % | 50–100 % | in 1 of 2 rounds |",
		"| Redis CPU per decision, 64 callers, 1 descriptor | ≤ 0.33x | 0.33x | yes |",
		"| decisions/s, 64 callers, 1 descriptor | ≥ 2.5x | 0.50–2.00x | **no** |",
		"| p50, 1 caller, 1 descriptor | ≤ 0.5x | 0.50x | yes |",
		"| 1 | 60 µs | 80 µs | 0.75x | 2.0k | 1.0k |",
		"| sliding window, 1 descriptor, 64 callers | FastLimit | 9.0k |",
		"| fixed window, 1 descriptor, 64 callers | FastLimit/reference | 0.50–2.00x |",
		"the servers taking turns (FastLimit, reference, FastLimit, ...)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md, "| sliding window, 1 descriptor, 64 callers | reference |") {
		t.Error("report has a reference row for a run the reference did not make")
	}
	if t.Failed() {
		t.Log(md)
	}
}
