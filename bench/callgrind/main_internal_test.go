package main

import (
	"bytes"
	"io"
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
