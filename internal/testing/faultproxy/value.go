package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
)

// RESP2 and RESP3 type bytes, as Value.Kind holds them.
const (
	KindSimple    = '+'
	KindError     = '-'
	KindInt       = ':'
	KindBulk      = '$'
	KindArray     = '*'
	KindNull      = '_'
	KindDouble    = ','
	KindBool      = '#'
	KindBigNum    = '('
	KindBulkError = '!'
	KindVerbatim  = '='
	KindMap       = '%'
	KindSet       = '~'
	KindAttribute = '|'
	KindPush      = '>'
)

// Limits of the parsers: past them a value is malformed and the
// connection that carried it is closed.
const (
	// DefaultMaxValue bounds the bytes of one reply or command.
	DefaultMaxValue = 64 << 20
	maxLine         = 1 << 20 // a simple string, error or header line
	maxDepth        = 128     // nesting of aggregates and attributes
)

// ErrMalformed marks bytes that are not RESP.
var ErrMalformed = errors.New("malformed RESP")

// Value is one RESP2 or RESP3 value. Kind says which fields hold it:
//   - Str: simple strings, errors, bulk strings, bulk errors, verbatim
//     strings ("txt:..."), doubles and big numbers (their text);
//   - Int: integers; Bool: booleans;
//   - Null: a nil bulk string or array ($-1, *-1) or a RESP3 null (_);
//   - Elems: arrays, sets and pushes; maps as key, value, key, value...;
//   - Attrs: the pairs of an attribute (|) that came before the value.
type Value struct {
	Kind  byte
	Str   string
	Int   int64
	Bool  bool
	Null  bool
	Elems []Value
	Attrs []Value
}

// Simple returns a simple string (+OK).
func Simple(s string) Value { return Value{Kind: KindSimple, Str: s} }

// Error returns an error reply, such as Error("BUSY Redis is busy").
func Error(s string) Value { return Value{Kind: KindError, Str: s} }

// Int returns an integer reply.
func Int(n int64) Value { return Value{Kind: KindInt, Int: n} }

// Bulk returns a bulk string.
func Bulk(s string) Value { return Value{Kind: KindBulk, Str: s} }

// Nil returns a RESP2 nil bulk string ($-1).
func Nil() Value { return Value{Kind: KindBulk, Null: true} }

// Array returns an array of elems.
func Array(elems ...Value) Value { return Value{Kind: KindArray, Elems: elems} }

// Ints returns an array of integers, the shape of this project's script
// replies.
func Ints(ns ...int64) Value {
	v := Value{Kind: KindArray, Elems: make([]Value, len(ns))}
	for i, n := range ns {
		v.Elems[i] = Int(n)
	}
	return v
}

// Bytes returns v in RESP.
func (v Value) Bytes() []byte { return v.AppendTo(nil) }

// AppendTo appends v in RESP to b.
func (v Value) AppendTo(b []byte) []byte {
	if len(v.Attrs) > 0 {
		b = appendHeader(b, KindAttribute, len(v.Attrs)/2)
		for _, a := range v.Attrs {
			b = a.AppendTo(b)
		}
	}
	switch v.Kind {
	case KindSimple, KindError, KindDouble, KindBigNum:
		b = append(b, v.Kind)
		b = append(b, v.Str...)
		return append(b, '\r', '\n')
	case KindInt:
		return appendHeader(b, KindInt, int(v.Int))
	case KindNull:
		return append(b, "_\r\n"...)
	case KindBool:
		if v.Bool {
			return append(b, "#t\r\n"...)
		}
		return append(b, "#f\r\n"...)
	case KindBulk, KindBulkError, KindVerbatim:
		if v.Null {
			return append(b, v.Kind, '-', '1', '\r', '\n')
		}
		b = appendHeader(b, v.Kind, len(v.Str))
		b = append(b, v.Str...)
		return append(b, '\r', '\n')
	case KindArray, KindSet, KindPush, KindMap:
		if v.Null {
			return append(b, v.Kind, '-', '1', '\r', '\n')
		}
		n := len(v.Elems)
		if v.Kind == KindMap {
			n /= 2
		}
		b = appendHeader(b, v.Kind, n)
		for _, e := range v.Elems {
			b = e.AppendTo(b)
		}
		return b
	}
	// An unknown kind encodes as a simple string of its text, so that
	// Bytes never produces a stream the proxy's own parser rejects.
	return Simple(v.Str).AppendTo(b)
}

func appendHeader(b []byte, kind byte, n int) []byte {
	b = append(b, kind)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// String returns v's RESP text with CR and LF escaped, for messages.
func (v Value) String() string { return strconv.Quote(string(v.Bytes())) }

// ParseValue parses exactly one RESP value from b; bytes left over are an
// error.
func ParseValue(b []byte) (Value, error) {
	r := bufio.NewReader(bytes.NewReader(b))
	p := parser{r: r, max: len(b) + 1, build: true}
	v, err := p.value(0)
	if err != nil {
		return Value{}, err
	}
	if r.Buffered() > 0 {
		return Value{}, fmt.Errorf("%w: %d bytes after the value", ErrMalformed, r.Buffered())
	}
	return v, nil
}

// ReadValue reads one RESP2 or RESP3 value from r, as a raw client of the
// proxy would: an error reply is a Value of KindError. A stream that ends
// before a value gives io.EOF, inside one io.ErrUnexpectedEOF; bytes that
// are not RESP an error wrapping ErrMalformed, after which r is unusable.
func ReadValue(r *bufio.Reader) (Value, error) {
	_, v, err := readValue(r, DefaultMaxValue, true)
	return v, err
}

// parser reads one RESP value from r, appending every byte it consumes to
// raw. It reads no further than the value, never allocates from a length
// before the data came, and fails with ErrMalformed rather than panic or
// wait for bytes a valid value would not need.
type parser struct {
	r     *bufio.Reader
	raw   []byte
	max   int  // bound on len(raw)
	build bool // build the Value tree, not only raw
}

// readValue reads one value from r and returns its raw bytes, with
// v filled in when build is set.
func readValue(r *bufio.Reader, max int, build bool) (raw []byte, v Value, err error) {
	p := parser{r: r, max: max, build: build}
	v, err = p.value(0)
	if errors.Is(err, io.EOF) && len(p.raw) > 0 {
		err = io.ErrUnexpectedEOF
	}
	return p.raw, v, err
}

func (p *parser) value(depth int) (Value, error) {
	if depth > maxDepth {
		return Value{}, fmt.Errorf("%w: nested deeper than %d", ErrMalformed, maxDepth)
	}
	line, err := p.line()
	if err != nil {
		return Value{}, err
	}
	kind, text := line[0], line[1:]
	v := Value{Kind: kind}
	switch kind {
	case KindSimple, KindError:
		if p.build {
			v.Str = string(text)
		}
	case KindInt:
		n, err := strconv.ParseInt(string(text), 10, 64)
		if err != nil {
			return Value{}, fmt.Errorf("%w: integer %q", ErrMalformed, text)
		}
		v.Int = n
	case KindNull:
		if len(text) != 0 {
			return Value{}, fmt.Errorf("%w: null %q", ErrMalformed, text)
		}
		v.Null = true
	case KindBool:
		if len(text) != 1 || (text[0] != 't' && text[0] != 'f') {
			return Value{}, fmt.Errorf("%w: boolean %q", ErrMalformed, text)
		}
		v.Bool = text[0] == 't'
	case KindDouble:
		if !validDouble(string(text)) {
			return Value{}, fmt.Errorf("%w: double %q", ErrMalformed, text)
		}
		v.Str = string(text)
	case KindBigNum:
		if _, ok := new(big.Int).SetString(string(text), 10); !ok {
			return Value{}, fmt.Errorf("%w: big number %q", ErrMalformed, text)
		}
		v.Str = string(text)
	case KindBulk, KindBulkError, KindVerbatim:
		return p.bulk(v, text)
	case KindArray, KindSet, KindPush, KindMap:
		return p.aggregate(v, text, depth)
	case KindAttribute:
		return p.attribute(text, depth)
	default:
		return Value{}, fmt.Errorf("%w: type byte %q", ErrMalformed, kind)
	}
	return v, nil
}

func validDouble(s string) bool {
	switch s {
	case "inf", "-inf", "nan":
		return true
	}
	if s == "" || s[0] == '+' && len(s) > 1 && s[1] == '-' {
		return false
	}
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// length parses an aggregate or bulk length: -1 (nil) or more.
func length(text []byte) (int, error) {
	n, err := strconv.ParseInt(string(text), 10, 32)
	if err != nil || n < -1 {
		return 0, fmt.Errorf("%w: length %q", ErrMalformed, text)
	}
	return int(n), nil
}

func (p *parser) bulk(v Value, text []byte) (Value, error) {
	n, err := length(text)
	if err != nil {
		return Value{}, err
	}
	if n == -1 {
		if v.Kind == KindVerbatim {
			return Value{}, fmt.Errorf("%w: nil verbatim string", ErrMalformed)
		}
		v.Null = true
		return v, nil
	}
	if len(p.raw)+n+2 > p.max {
		return Value{}, fmt.Errorf("%w: bulk of %d bytes, more than %d", ErrMalformed, n, p.max)
	}
	start := len(p.raw)
	// Read in pieces so that a lying length costs no more memory than
	// the bytes that really came.
	for left := n + 2; left > 0; {
		chunk := min(left, 64<<10)
		p.raw = append(p.raw, make([]byte, chunk)...)
		if _, err := io.ReadFull(p.r, p.raw[len(p.raw)-chunk:]); err != nil {
			return Value{}, err
		}
		left -= chunk
	}
	data := p.raw[start : start+n]
	if p.raw[start+n] != '\r' || p.raw[start+n+1] != '\n' {
		return Value{}, fmt.Errorf("%w: bulk of %d bytes not followed by CRLF", ErrMalformed, n)
	}
	if v.Kind == KindVerbatim && (n < 4 || data[3] != ':') {
		return Value{}, fmt.Errorf("%w: verbatim string without a format", ErrMalformed)
	}
	if p.build {
		v.Str = string(data)
	}
	return v, nil
}

func (p *parser) aggregate(v Value, text []byte, depth int) (Value, error) {
	n, err := length(text)
	if err != nil {
		return Value{}, err
	}
	if n == -1 {
		if v.Kind != KindArray {
			return Value{}, fmt.Errorf("%w: nil %q", ErrMalformed, v.Kind)
		}
		v.Null = true
		return v, nil
	}
	if v.Kind == KindMap {
		n *= 2
	}
	if n == 0 && v.Kind == KindPush {
		// A push's first element names it.
		return Value{}, fmt.Errorf("%w: empty push", ErrMalformed)
	}
	for range n {
		e, err := p.value(depth + 1)
		if err != nil {
			return Value{}, err
		}
		if p.build {
			v.Elems = append(v.Elems, e)
		}
	}
	return v, nil
}

// attribute reads an attribute's pairs and the value they describe: one
// reply.
func (p *parser) attribute(text []byte, depth int) (Value, error) {
	n, err := length(text)
	if err != nil || n < 0 {
		return Value{}, fmt.Errorf("%w: attribute length %q", ErrMalformed, text)
	}
	var attrs []Value
	for range 2 * n {
		a, err := p.value(depth + 1)
		if err != nil {
			return Value{}, err
		}
		if p.build {
			attrs = append(attrs, a)
		}
	}
	if next, err := p.r.Peek(1); err == nil && next[0] == KindAttribute {
		return Value{}, fmt.Errorf("%w: attribute of an attribute", ErrMalformed)
	}
	v, err := p.value(depth + 1)
	if err != nil {
		return Value{}, err
	}
	v.Attrs = attrs
	return v, nil
}

// line reads a header or simple line, CRLF included in raw, and returns it
// without its CRLF. It is never empty.
func (p *parser) line() ([]byte, error) {
	start := len(p.raw)
	for {
		chunk, err := p.r.ReadSlice('\n')
		p.raw = append(p.raw, chunk...)
		if len(p.raw)-start > maxLine || len(p.raw) > p.max {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrMalformed, min(maxLine, p.max))
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	l := p.raw[start:]
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("%w: line %q", ErrMalformed, l)
	}
	l = l[:len(l)-2]
	if bytes.IndexByte(l, '\r') >= 0 {
		return nil, fmt.Errorf("%w: CR inside line %q", ErrMalformed, l)
	}
	return l, nil
}
