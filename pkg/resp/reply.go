package resp

import (
	"bufio"
	"errors"
	"fmt"
	"math"
)

// Reply kinds, by their RESP2 type byte.
const (
	KindStatus  = '+'
	KindError   = '-'
	KindInt     = ':'
	KindBulk    = '$'
	KindArray   = '*'
	maxBulk     = 512 << 20 // Redis' proto-max-bulk-len default
	maxArray    = 1 << 24
	maxLineSize = 64 << 10
)

// ErrProtocol marks a reply this client cannot read; the connection that
// carried it is closed.
var ErrProtocol = errors.New("redis protocol error")

// Reply is one reply from Redis. Kind says which fields hold it: Str for
// status, error and bulk replies (Nil for a nil bulk or array), Int for
// integers, Ints for arrays. Arrays are read as integers only, which is
// what this project's scripts return; an array holding anything else is
// read through, and Mixed reports it.
type Reply struct {
	Kind  byte
	Nil   bool
	Mixed bool
	Int   int64
	Str   []byte
	Ints  []int64
}

func (r *Reply) reset() {
	r.Kind, r.Nil, r.Mixed, r.Int = 0, false, false, 0
	r.Str = r.Str[:0]
	r.Ints = r.Ints[:0]
}

// Error is an error reply from Redis, such as "NOSCRIPT No matching script".
type Error string

func (e Error) Error() string { return string(e) }

// Err returns the reply as an Error if Redis answered with one.
func (r *Reply) Err() error {
	if r.Kind == KindError {
		return Error(r.Str)
	}
	return nil
}

// HasErrorPrefix reports whether r is an error reply whose code is prefix,
// e.g. "NOSCRIPT".
func (r *Reply) HasErrorPrefix(prefix string) bool {
	if r.Kind != KindError || len(r.Str) < len(prefix) || string(r.Str[:len(prefix)]) != prefix {
		return false
	}
	return len(r.Str) == len(prefix) || r.Str[len(prefix)] == ' '
}

// readReply reads one reply into r, reusing its buffers.
func readReply(br *bufio.Reader, r *Reply) error {
	r.reset()
	line, err := readLine(br)
	if err != nil {
		return err
	}
	if len(line) == 0 {
		return fmt.Errorf("%w: empty line", ErrProtocol)
	}
	r.Kind = line[0]
	switch r.Kind {
	case KindStatus, KindError:
		r.Str = append(r.Str[:0], line[1:]...)
		return nil
	case KindInt:
		r.Int, err = parseInt(line[1:])
		return err
	case KindBulk:
		n, err := parseInt(line[1:])
		if err != nil {
			return err
		}
		if n < 0 {
			r.Nil = true
			return nil
		}
		r.Str, err = readBulk(br, r.Str[:0], n, true)
		return err
	case KindArray:
		n, err := parseInt(line[1:])
		if err != nil {
			return err
		}
		if n < 0 {
			r.Nil = true
			return nil
		}
		if n > maxArray {
			return fmt.Errorf("%w: array of %d elements", ErrProtocol, n)
		}
		r.Ints = r.Ints[:0]
		for range n {
			v, isInt, err := readElement(br, 0)
			if err != nil {
				return err
			}
			if !isInt {
				r.Mixed = true
				continue
			}
			r.Ints = append(r.Ints, v)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown reply type %q", ErrProtocol, r.Kind)
}

// readElement reads an array element; for anything but an integer it reads
// the element through and reports isInt false.
func readElement(br *bufio.Reader, depth int) (v int64, isInt bool, err error) {
	if depth > 8 {
		return 0, false, fmt.Errorf("%w: arrays nested too deep", ErrProtocol)
	}
	line, err := readLine(br)
	if err != nil {
		return 0, false, err
	}
	if len(line) == 0 {
		return 0, false, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	switch line[0] {
	case KindInt:
		v, err := parseInt(line[1:])
		return v, err == nil, err
	case KindStatus, KindError:
		return 0, false, nil
	case KindBulk:
		n, err := parseInt(line[1:])
		if err != nil || n < 0 {
			return 0, false, err
		}
		_, err = readBulk(br, nil, n, false)
		return 0, false, err
	case KindArray:
		n, err := parseInt(line[1:])
		if err != nil || n < 0 {
			return 0, false, err
		}
		if n > maxArray {
			return 0, false, fmt.Errorf("%w: array of %d elements", ErrProtocol, n)
		}
		for range n {
			if _, _, err := readElement(br, depth+1); err != nil {
				return 0, false, err
			}
		}
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("%w: unknown reply type %q", ErrProtocol, line[0])
}

// readLine returns a line without its CRLF. The slice is valid until the
// next read from br.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		// Rare (a long error message): gather the line in its own buffer.
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull && len(long) <= maxLineSize {
			line, err = br.ReadSlice('\n')
			long = append(long, line...)
		}
		if len(long) > maxLineSize {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, maxLineSize)
		}
		line = long
	}
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not ended by CRLF", ErrProtocol)
	}
	return line[:len(line)-2], nil
}

// readBulk reads a bulk string's n bytes and its CRLF, appending the bytes
// to dst when keep is set.
func readBulk(br *bufio.Reader, dst []byte, n int64, keep bool) ([]byte, error) {
	if n > maxBulk {
		return dst, fmt.Errorf("%w: bulk string of %d bytes", ErrProtocol, n)
	}
	for left := n + 2; left > 0; {
		chunk, err := br.Peek(int(min(left, int64(br.Size()))))
		if len(chunk) == 0 && err != nil {
			return dst, err
		}
		take := chunk
		if body := left - 2; int64(len(take)) > body {
			take = take[:max(body, 0)]
		}
		if keep {
			dst = append(dst, take...)
		}
		if _, err := br.Discard(len(chunk)); err != nil {
			return dst, err
		}
		left -= int64(len(chunk))
	}
	// The last two bytes read were CRLF; a wrong terminator shows up as a
	// malformed next line.
	return dst, nil
}

// parseInt parses a decimal integer without allocating.
func parseInt(p []byte) (int64, error) {
	if len(p) == 0 || len(p) > 20 {
		return 0, fmt.Errorf("%w: bad integer %q", ErrProtocol, p)
	}
	neg := p[0] == '-'
	if neg || p[0] == '+' {
		p = p[1:]
		if len(p) == 0 {
			return 0, fmt.Errorf("%w: bad integer", ErrProtocol)
		}
	}
	var v uint64
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: bad integer %q", ErrProtocol, p)
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, fmt.Errorf("%w: integer overflows", ErrProtocol)
		}
		v = v*10 + d
	}
	if neg {
		if v > 1<<63 {
			return 0, fmt.Errorf("%w: integer overflows", ErrProtocol)
		}
		return -int64(v), nil
	}
	if v > 1<<63-1 {
		return 0, fmt.Errorf("%w: integer overflows", ErrProtocol)
	}
	return int64(v), nil
}
