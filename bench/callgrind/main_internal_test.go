package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestParseProfile reads the total and the inclusive costs of the calls
// into each function from a callgrind profile, names given once and then
// referred to by number, a function's calls to itself left out, and the
// calls into the allocator.
func TestParseProfile(t *testing.T) {
	const text = `positions: line
events: Ir
summary: 1000
fn=(1) call
0 10
cfn=(2) evalShaCommand
calls=2 0
0 600
fn=(2)
0 50
cfn=(3) scriptCall
calls=3 0
0 300
fn=(3)
cfn=(1)
calls=3 0
0 200
fn=(1)
cfn=(1)
calls=1 0
0 99
cfn=(4) realloc
calls=7 0
0 70
fn=(3)
cfn=(5) free
calls=5 0
0 20
cfn=(6) malloc
calls=2 0
0 30
totals: 1000
`
	total, incl, allocs, err := parseProfile(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"evalShaCommand": 600, "scriptCall": 300, "call": 200, "realloc": 70, "free": 20, "malloc": 30}
	if total != 1000 || len(incl) != len(want) || allocs != 9 {
		t.Errorf("total %d, inclusive %v, allocations %d; want 1000, %v, 9", total, incl, allocs, want)
	}
	for k, v := range want {
		if incl[k] != v {
			t.Errorf("%s = %d, want %d", k, incl[k], v)
		}
	}
	if _, _, _, err := parseProfile(strings.NewReader("events: Ir\n")); err == nil {
		t.Error("a profile without a total parsed")
	}
}

// TestWriteCommand writes RESP as redis-cli --pipe reads it.
func TestWriteCommand(t *testing.T) {
	var b bytes.Buffer
	writeCommand(&b, "EVALSHA", "ab", int64(1), 2, []byte("k\x01"))
	if want := "*5\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\n2\r\n$2\r\nk\x01\r\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

// TestFlags refuses shapes the store cannot send in one call.
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"-ops", "1,64", "-algs", "bucket", "-keys", "existing"}, true},
		{[]string{"-ops", "256"}, false},
		{[]string{"-ops", "0"}, false},
		{[]string{"-algs", "gcra"}, false},
		{[]string{"-keys", "old"}, false},
		{[]string{"-calls", "0"}, false},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if (err == nil) != tc.ok {
			t.Errorf("%q: error %v, want ok %v", tc.args, err, tc.ok)
		}
	}
}

// TestSizeClass follows jemalloc's small size classes, which decide what
// a key costs: a key of 44 bytes (with its 3-byte header and NUL) fits in
// 48, one of 45 takes 64.
func TestSizeClass(t *testing.T) {
	for n, want := range map[int]int{1: 8, 8: 8, 9: 16, 17: 32, 33: 48, 48: 48, 49: 64, 128: 128, 129: 160, 200: 224} {
		if got := sizeClass(n); got != want {
			t.Errorf("sizeClass(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestMemoryKeys: the memory rows' keys are pkg/limiter's and the
// reference's, and the table of parts adds up to the whole key.
func TestMemoryKeys(t *testing.T) {
	if got, want := memoryKey("fixed", 7), "ratelimit:{bench/fw_hour=user-7}:default:"; got != want {
		t.Errorf("memoryKey = %q, want %q", got, want)
	}
	if got, want := referenceKey(7, 1796414400), "bench_fw_hour_user-7_1796414400"; got != want {
		t.Errorf("referenceKey = %q, want %q", got, want)
	}
	var b bytes.Buffer
	printKeyParts(&b)
	for _, want := range []string{"| prefix and its separator | `ratelimit:` | 10 | — | 0 |", "| the key | | 55 | | 35 |",
		"| its allocation (3-byte header, NUL, jemalloc's class) | | 64 | | 48 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("parts lack %q:\n%s", want, b.String())
		}
	}
}

// TestMemory runs -memory on a few identifiers: every row has a key an
// identifier, and costs Redis something for each.
func TestMemory(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("FASTLIMIT_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-server not found and FASTLIMIT_REQUIRE_REDIS=1")
		}
		t.Skip("redis-server not found")
	}
	o, err := parseFlags([]string{"-memory", "-ids", "2000", "-hits", "1,10"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := measure(o, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| fixed window, 1 hit an identifier | 2,000 | ", "| token bucket, 10 hits an identifier | 2,000 | ",
		"| reference (INCRBY, EXPIRE), 10 hits an identifier | 2,000 | ", "| the key | | 55 | | 35 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
