package main

import (
	"bytes"
	"io"
	"testing"
)

// TestInclusive reads the functions' inclusive counts from
// callgrind_annotate's list, the first line of each (a recursive
// function's later lines are its cycles).
func TestInclusive(t *testing.T) {
	const text = `--------------------------------------------------------------------------------
Ir                   file:function
--------------------------------------------------------------------------------
67,250,217 (100.0%)  PROGRAM TOTALS
35,545,457 (52.86%)  ???:evalShaCommand [/usr/bin/redis-check-rdb]
 4,141,353 ( 6.16%)  ???:scriptCall [/usr/bin/redis-check-rdb]
 8,889,053 (13.22%)  ???:0x000000000015b860'2 [/usr/bin/redis-check-rdb]
 1,000 ( 0.01%)  ???:scriptCall'2 [/usr/bin/redis-check-rdb]
`
	got := inclusive(text)
	want := map[string]int64{"evalShaCommand": 35545457, "scriptCall": 4141353}
	if len(got) != len(want) {
		t.Errorf("inclusive = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if n, err := collected("==1== Events    : Ir\n==1== Collected : 45223632\n"); err != nil || n != 45223632 {
		t.Errorf("collected = %d, %v", n, err)
	}
	if _, err := collected("nothing"); err == nil {
		t.Error("collected found a count in a log without one")
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
