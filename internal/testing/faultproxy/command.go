package faultproxy

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// maxArgs is Redis' own bound on the arguments of one command.
const maxArgs = 1024 * 1024

// Command is one request a client sent, as the proxy saw it.
type Command struct {
	// Name is the command's name in upper case ("EVALSHA").
	Name string
	// Args are its arguments, as sent.
	Args []string
	// Conn is the ID of the connection that carried it.
	Conn int64
	// Index is its position on that connection, from 1: a connection's
	// handshake (AUTH, HELLO, SELECT...) comes first.
	Index int
}

// Is reports whether c is the command name ("EVAL") or, with a space, the
// command and subcommand ("CLUSTER SLOTS"), in any case.
func (c *Command) Is(name string) bool {
	cmd, sub, hasSub := strings.Cut(name, " ")
	if !strings.EqualFold(c.Name, cmd) {
		return false
	}
	if !hasSub {
		return true
	}
	return len(c.Args) > 0 && strings.EqualFold(c.Args[0], strings.TrimSpace(sub))
}

// String returns the command and its arguments, for messages.
func (c *Command) String() string {
	return strings.TrimSpace(c.Name + " " + strings.Join(c.Args, " "))
}

// readCommand reads one request from r: a RESP array of bulk strings, or
// an inline command (a line of words). It returns the raw bytes to
// forward and the command, which is nil for what Redis ignores (an empty
// line, an array of zero or fewer elements).
func readCommand(r *bufio.Reader, max int) ([]byte, *Command, error) {
	p := parser{r: r, max: max, build: true}
	line, err := p.line0()
	if err != nil {
		return nil, nil, err
	}
	if len(line) == 0 || line[0] != KindArray {
		words := strings.Fields(string(line))
		if len(words) == 0 {
			return p.raw, nil, nil
		}
		return p.raw, &Command{Name: strings.ToUpper(words[0]), Args: words[1:]}, nil
	}
	n, err := strconv.ParseInt(string(line[1:]), 10, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: request array length %q", ErrMalformed, line[1:])
	}
	if n <= 0 {
		return p.raw, nil, nil
	}
	if n > maxArgs {
		return nil, nil, fmt.Errorf("%w: request of %d arguments", ErrMalformed, n)
	}
	args := make([]string, 0, min(n, 64))
	for range n {
		h, err := p.line()
		if err != nil {
			return nil, nil, err
		}
		if h[0] != KindBulk {
			return nil, nil, fmt.Errorf("%w: request argument %q is not a bulk string", ErrMalformed, h)
		}
		a, err := p.bulk(Value{Kind: KindBulk}, h[1:])
		if err != nil {
			return nil, nil, err
		}
		if a.Null {
			return nil, nil, fmt.Errorf("%w: nil request argument", ErrMalformed)
		}
		args = append(args, a.Str)
	}
	return p.raw, &Command{Name: strings.ToUpper(args[0]), Args: args[1:]}, nil
}

// line0 is line for the first line of a request, which may be an empty
// inline command (a bare CRLF or LF, which Redis accepts).
func (p *parser) line0() ([]byte, error) {
	c, err := p.r.Peek(1)
	if err != nil {
		return nil, err
	}
	if c[0] != KindArray {
		return p.inline()
	}
	return p.line()
}

// inline reads an inline command's line: it ends at LF, with or without a
// CR before it.
func (p *parser) inline() ([]byte, error) {
	start := len(p.raw)
	for {
		chunk, err := p.r.ReadSlice('\n')
		p.raw = append(p.raw, chunk...)
		if len(p.raw)-start > 64<<10 {
			return nil, fmt.Errorf("%w: inline command longer than 64 KiB", ErrMalformed)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	return []byte(strings.TrimRight(string(p.raw[start:]), "\r\n")), nil
}
