package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestParseValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Value
	}{
		{"simple", "+OK\r\n", Simple("OK")},
		{"empty simple", "+\r\n", Simple("")},
		{"error", "-BUSY Redis is busy\r\n", Error("BUSY Redis is busy")},
		{"integer", ":-42\r\n", Int(-42)},
		{"bulk", "$5\r\nhe\r\no\r\n", Bulk("he\r\no")},
		{"empty bulk", "$0\r\n\r\n", Bulk("")},
		{"nil bulk", "$-1\r\n", Nil()},
		{"array", "*2\r\n:1\r\n$1\r\na\r\n", Array(Int(1), Bulk("a"))},
		{"nil array", "*-1\r\n", Value{Kind: KindArray, Null: true}},
		{"empty array", "*0\r\n", Array()},
		{"nested", "*2\r\n*1\r\n:1\r\n*0\r\n", Array(Array(Int(1)), Array())},
		{"null", "_\r\n", Value{Kind: KindNull, Null: true}},
		{"double", ",3.25\r\n", Value{Kind: KindDouble, Str: "3.25"}},
		{"double inf", ",-inf\r\n", Value{Kind: KindDouble, Str: "-inf"}},
		{"bool", "#t\r\n", Value{Kind: KindBool, Bool: true}},
		{"big number", "(3492890328409238509324850943850943825024385\r\n", Value{Kind: KindBigNum, Str: "3492890328409238509324850943850943825024385"}},
		{"bulk error", "!5\r\nERR x\r\n", Value{Kind: KindBulkError, Str: "ERR x"}},
		{"verbatim", "=8\r\ntxt:Some\r\n", Value{Kind: KindVerbatim, Str: "txt:Some"}},
		{"map", "%1\r\n+server\r\n+redis\r\n", Value{Kind: KindMap, Elems: []Value{Simple("server"), Simple("redis")}}},
		{"set", "~2\r\n:1\r\n:2\r\n", Value{Kind: KindSet, Elems: []Value{Int(1), Int(2)}}},
		{"push", ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", Value{Kind: KindPush, Elems: []Value{Bulk("message"), Bulk("ch"), Bulk("hi")}}},
		{"attribute", "|1\r\n+ttl\r\n:3\r\n:7\r\n", Value{Kind: KindInt, Int: 7, Attrs: []Value{Simple("ttl"), Int(3)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseValue([]byte(tc.in))
			if err != nil {
				t.Fatalf("ParseValue(%q): %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseValue(%q) = %#v, want %#v", tc.in, got, tc.want)
			}
			if enc := string(got.Bytes()); enc != tc.in {
				t.Errorf("Bytes() = %q, want %q", enc, tc.in)
			}
		})
	}
}

func TestParseValueMalformed(t *testing.T) {
	for _, in := range []string{
		"", "+OK", "+OK\n", "+O\rK\r\n", "?x\r\n", ":12a\r\n", ":\r\n",
		"$3\r\nab\r\n", "$2\r\nabc\r\n", "$-2\r\n", "$x\r\n", "$1\r\n",
		"*2\r\n:1\r\n", "*-2\r\n", "%1\r\n:1\r\n", "~-1\r\n", ">0\r\n",
		"_x\r\n", "#x\r\n", ",abc\r\n", "(12x\r\n", "=3\r\ntxt\r\n", "=-1\r\n",
		"|1\r\n+a\r\n", "|1\r\n+a\r\n+b\r\n|0\r\n:1\r\n",
		"+OK\r\n+extra\r\n",
		strings.Repeat("*1\r\n", maxDepth+2) + ":1\r\n",
	} {
		if v, err := ParseValue([]byte(in)); err == nil {
			t.Errorf("ParseValue(%q) = %v, want an error", in, v)
		}
	}
}

// TestReadValueLyingLength shows that a bulk length larger than the data
// costs no more memory than the data, and ends at EOF.
func TestReadValueLyingLength(t *testing.T) {
	r := bufio.NewReader(strings.NewReader("$100000000\r\nabc"))
	_, _, err := readValue(r, DefaultMaxValue*4, false)
	if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		t.Fatalf("readValue = %v, want EOF", err)
	}
	r = bufio.NewReader(strings.NewReader("$100000000\r\nabc"))
	if _, _, err = readValue(r, 1<<20, false); !errors.Is(err, ErrMalformed) {
		t.Fatalf("readValue past max = %v, want ErrMalformed", err)
	}
}

func TestReadCommand(t *testing.T) {
	for _, tc := range []struct {
		in   string
		name string
		args []string
	}{
		{"*2\r\n$4\r\nincr\r\n$1\r\nk\r\n", "INCR", []string{"k"}},
		{"*1\r\n$4\r\nPING\r\n", "PING", []string{}},
		{"PING\r\n", "PING", []string{}},
		{"set a  b\n", "SET", []string{"a", "b"}},
		{"\r\n", "", nil},
		{"*0\r\n", "", nil},
		{"*-1\r\n", "", nil},
	} {
		raw, cmd, err := readCommand(bufio.NewReader(strings.NewReader(tc.in)), DefaultMaxValue)
		if err != nil {
			t.Fatalf("readCommand(%q): %v", tc.in, err)
		}
		if string(raw) != tc.in {
			t.Errorf("readCommand(%q) raw = %q", tc.in, raw)
		}
		if tc.name == "" {
			if cmd != nil {
				t.Errorf("readCommand(%q) = %v, want no command", tc.in, cmd)
			}
			continue
		}
		if cmd == nil || cmd.Name != tc.name || !reflect.DeepEqual(cmd.Args, tc.args) {
			t.Errorf("readCommand(%q) = %#v, want %s %q", tc.in, cmd, tc.name, tc.args)
		}
	}
	for _, in := range []string{"*1\r\n:1\r\n", "*1\r\n$-1\r\n", "*x\r\n", "*2000000\r\n", "*1\r\n$3\r\nab\r\n"} {
		if _, cmd, err := readCommand(bufio.NewReader(strings.NewReader(in)), DefaultMaxValue); err == nil {
			t.Errorf("readCommand(%q) = %v, want an error", in, cmd)
		}
	}
}

func TestCommandIs(t *testing.T) {
	c := &Command{Name: "CLUSTER", Args: []string{"slots"}}
	for name, want := range map[string]bool{"cluster": true, "CLUSTER SLOTS": true, "cluster nodes": false, "CLIENT": false} {
		if got := c.Is(name); got != want {
			t.Errorf("Is(%q) = %v, want %v", name, got, want)
		}
	}
}

// FuzzReadValue feeds arbitrary bytes to the reply parser, as a stream of
// replies: it must never panic or hang, consume exactly the bytes of each
// value it returns, and every value must survive a round trip.
func FuzzReadValue(f *testing.F) {
	for _, s := range []string{
		"+OK\r\n", "-ERR x\r\n:1\r\n", "$3\r\nabc\r\n$-1\r\n", "*2\r\n:1\r\n*-1\r\n",
		"%1\r\n+a\r\n:1\r\n", "~1\r\n_\r\n", ">2\r\n+message\r\n,1.5\r\n", "#f\r\n(12\r\n",
		"=7\r\ntxt:abc\r\n", "!3\r\nERR\r\n", "|1\r\n+k\r\n+v\r\n*1\r\n:2\r\n", "$100\r\nab",
		strings.Repeat("*1\r\n", 200),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		consumed := 0
		for {
			raw, v, err := readValue(r, 1<<16, true)
			if err != nil {
				return
			}
			if !bytes.Equal(raw, data[consumed:consumed+len(raw)]) {
				t.Fatalf("raw %q is not the next bytes of the input", raw)
			}
			consumed += len(raw)
			again, err := ParseValue(v.Bytes())
			if err != nil {
				t.Fatalf("ParseValue(Bytes of %q): %v", raw, err)
			}
			if !reflect.DeepEqual(again, v) {
				t.Fatalf("round trip of %q: %#v, want %#v", raw, again, v)
			}
		}
	})
}

// FuzzReadCommand does the same for the request parser.
func FuzzReadCommand(f *testing.F) {
	for _, s := range []string{"*1\r\n$4\r\nPING\r\n", "GET a\r\n", "\r\n*0\r\n", "*2\r\n$3\r\nGET\r\n$"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		consumed := 0
		for {
			raw, cmd, err := readCommand(r, 1<<16)
			if err != nil {
				return
			}
			if len(raw) == 0 || !bytes.Equal(raw, data[consumed:consumed+len(raw)]) {
				t.Fatalf("raw %q is not the next bytes of the input", raw)
			}
			consumed += len(raw)
			if cmd != nil && cmd.Name != strings.ToUpper(cmd.Name) {
				t.Fatalf("name %q not in upper case", cmd.Name)
			}
		}
	})
}
