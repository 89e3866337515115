package resp

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func read(t testing.TB, wire string, r *Reply) error {
	t.Helper()
	return readReply(bufio.NewReaderSize(strings.NewReader(wire), 16), r)
}

func TestReadReply(t *testing.T) {
	for _, tc := range []struct {
		wire string
		want Reply
	}{
		{"+OK\r\n", Reply{Kind: KindStatus, Str: []byte("OK")}},
		{"-NOSCRIPT No matching script\r\n", Reply{Kind: KindError, Str: []byte("NOSCRIPT No matching script")}},
		{":-42\r\n", Reply{Kind: KindInt, Int: -42}},
		{":9223372036854775807\r\n", Reply{Kind: KindInt, Int: 1<<63 - 1}},
		{":-9223372036854775808\r\n", Reply{Kind: KindInt, Int: -1 << 63}},
		{"$0\r\n\r\n", Reply{Kind: KindBulk, Str: []byte{}}},
		{"$-1\r\n", Reply{Kind: KindBulk, Nil: true}},
		// Longer than the reader's 16-byte buffer.
		{"$40\r\n1cda3f68c1381bc0168e453ed4bd19708e8df7ec\r\n", Reply{Kind: KindBulk, Str: []byte("1cda3f68c1381bc0168e453ed4bd19708e8df7ec")}},
		{"*4\r\n:1\r\n:999000\r\n:0\r\n:1000\r\n", Reply{Kind: KindArray, Ints: []int64{1, 999000, 0, 1000}}},
		{"*0\r\n", Reply{Kind: KindArray, Ints: []int64{}}},
		{"-ERR " + strings.Repeat("long ", 20) + "\r\n", Reply{Kind: KindError, Str: []byte("ERR " + strings.Repeat("long ", 20))}},
		{"*-1\r\n", Reply{Kind: KindArray, Nil: true}},
		{"*3\r\n:1\r\n$3\r\nabc\r\n*2\r\n+x\r\n$-1\r\n", Reply{Kind: KindArray, Mixed: true, Ints: []int64{1}}},
	} {
		var got Reply
		if err := read(t, tc.wire, &got); err != nil {
			t.Errorf("%q: %v", tc.wire, err)
			continue
		}
		if got.Kind != tc.want.Kind || got.Nil != tc.want.Nil || got.Mixed != tc.want.Mixed || got.Int != tc.want.Int ||
			string(got.Str) != string(tc.want.Str) || !equalInts(got.Ints, tc.want.Ints) {
			t.Errorf("%q: got %+v, want %+v", tc.wire, got, tc.want)
		}
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadReplyStream reads replies back to back, reusing one Reply, as a
// connection's reader does: every reply ends where the next begins.
func TestReadReplyStream(t *testing.T) {
	wire := "*2\r\n:1\r\n$2\r\nab\r\n$5\r\nhello\r\n:7\r\n-ERR x\r\n*1\r\n:3\r\n"
	br := bufio.NewReaderSize(strings.NewReader(wire), 16)
	var r Reply
	var got []string
	for {
		r.reset()
		err := readReply(br, &r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(r.Kind)+string(r.Str))
	}
	if want := []string{"*", "$hello", ":", "-ERR x", "*"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("kinds = %v, want %v", got, want)
	}
}

func TestReadReplyErrors(t *testing.T) {
	for _, wire := range []string{
		"\r\n",
		"OK\r\n",
		"+OK\n",
		":12a\r\n",
		":\r\n",
		":-\r\n",
		":99999999999999999999\r\n",
		":9223372036854775808\r\n",
		":-9223372036854775809\r\n",
		"$x\r\n",
		"$999999999999\r\n",
		"*99999999999\r\n",
		"*1\r\n?\r\n",
		"*1\r\n" + strings.Repeat("*1\r\n", 20) + ":1\r\n",
		"+" + strings.Repeat("x", maxLineSize+10) + "\r\n",
	} {
		var r Reply
		err := read(t, wire, &r)
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: err = %v, want ErrProtocol", wire, err)
		}
	}
	// A reply cut short is a read error, not a protocol error.
	for _, wire := range []string{"", "+OK", "$5\r\nab", "*2\r\n:1\r\n"} {
		var r Reply
		if err := read(t, wire, &r); err == nil || errors.Is(err, ErrProtocol) {
			t.Errorf("%q: err = %v, want an EOF", wire, err)
		}
	}
}

func TestBatchEncoding(t *testing.T) {
	b := newBatch()
	b.Command(4)
	b.String("EVALSHA")
	b.Bytes([]byte("ab"))
	b.Int(-12)
	b.String("")
	b.Command(1)
	b.String("PING")
	want := "*4\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$3\r\n-12\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n"
	if string(b.buf) != want || b.Len() != 2 || b.args != 0 {
		t.Errorf("encoded %q (%d commands, %d args missing), want %q", b.buf, b.Len(), b.args, want)
	}
	b.reset()
	if len(b.buf) != 0 || b.Len() != 0 {
		t.Errorf("reset left %q", b.buf)
	}
}

func TestHasErrorPrefix(t *testing.T) {
	r := Reply{Kind: KindError, Str: []byte("NOSCRIPT No matching script")}
	if !r.HasErrorPrefix("NOSCRIPT") || r.HasErrorPrefix("NOSCRIPTX") || r.HasErrorPrefix("ERR") {
		t.Error("HasErrorPrefix mismatched")
	}
	if (&Reply{Kind: KindError, Str: []byte("NOSCRIPTS")}).HasErrorPrefix("NOSCRIPT") {
		t.Error("a longer code matched")
	}
	if (&Reply{Kind: KindStatus, Str: []byte("NOSCRIPT")}).HasErrorPrefix("NOSCRIPT") {
		t.Error("a status reply matched")
	}
}

// FuzzReadReply: any bytes give replies or an error, never a panic, and a
// reader never reads past the reply it parsed in a valid stream.
func FuzzReadReply(f *testing.F) {
	for _, seed := range []string{"+OK\r\n", "-ERR x\r\n", ":1\r\n", "$3\r\nabc\r\n", "$-1\r\n",
		"*2\r\n:1\r\n:2\r\n", "*1\r\n*1\r\n$1\r\nx\r\n", "*-1\r\n", ":-0\r\n", "$0\r\n\r\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		br := bufio.NewReaderSize(strings.NewReader(string(wire)), 16)
		var r Reply
		for range 64 {
			r.reset()
			if err := readReply(br, &r); err != nil {
				return
			}
			switch r.Kind {
			case KindStatus, KindError, KindInt, KindBulk, KindArray:
			default:
				t.Fatalf("reply of kind %q accepted", r.Kind)
			}
		}
	})
}
