package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// syntaxErrors turns a yaml.v3 syntax error into an *Error at the line
// that holds the mistake, with a hint for indentation. yaml.v3 names the
// line where the enclosing block starts (a mis-indented key on line 6 is
// reported at line 2); the mistake is on the first line that, added to
// the lines before it, makes the document fail with the same message.
func syntaxErrors(file string, data []byte, err error) []*Error {
	errs := yamlErrors(file, err)
	if len(errs) != 1 || errs[0].Line == 0 {
		return errs
	}
	e := errs[0]
	msg := strings.TrimPrefix(e.Msg, "invalid YAML: ")
	lines := bytes.SplitAfter(data, []byte("\n"))
	if line := problemLine(lines, msg, e.Line); line > e.Line {
		e.Line = line
	}
	if h := indentHint(lines, e.Line, msg); h != "" {
		e.Msg += "; " + h
	}
	return errs
}

// problemLine returns the first line whose prefix of the document fails
// to parse with msg, searched from reported (yaml.v3's line, at or before
// the mistake); 0 if the document's prefixes do not show it.
func problemLine(lines [][]byte, msg string, reported int) int {
	lo, hi := min(max(reported-1, 0), len(lines)), len(lines)
	if lo >= hi || !failsWith(lines[:hi], msg) {
		return 0
	}
	if failsWith(lines[:lo], msg) {
		lo = 0
	}
	for hi-lo > 1 { // the first failing prefix, lines[:lo] passing
		mid := (lo + hi) / 2
		if failsWith(lines[:mid], msg) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// failsWith reports whether the first two YAML documents of lines fail to
// parse with msg.
func failsWith(lines [][]byte, msg string) bool {
	dec := yaml.NewDecoder(bytes.NewReader(bytes.Join(lines, nil)))
	for range 2 {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			m := yamlLine.ReplaceAllString(err.Error(), "")
			return strings.TrimPrefix(m, "yaml: ") == msg
		}
	}
	return false
}

// indentMsgs are the yaml.v3 messages a line indented wrongly gives.
var indentMsgs = []string{
	"did not find expected key",
	"did not find expected '-' indicator",
	"mapping values are not allowed in this context",
	"block sequence entries are not allowed in this context",
	"did not find expected <document start>",
}

// indentHint compares the indentation of line n (1-based) with that of
// the lines enclosing it: the keys above a key, the list items above a
// list item.
func indentHint(lines [][]byte, n int, msg string) string {
	known := false
	for _, m := range indentMsgs {
		known = known || msg == m
	}
	if !known || n < 1 || n > len(lines) {
		return ""
	}
	at, ok := lineShape(lines[n-1])
	if !ok {
		return ""
	}
	// The enclosing lines: walking up, each less indented than all below it.
	type col struct{ col, line int }
	var cols []col
	least := 1 << 30
	for i := n - 2; i >= 0; i-- {
		s, ok := lineShape(lines[i])
		if !ok || s.indent >= least {
			continue
		}
		least = s.indent
		switch {
		case at.item && s.item:
			cols = append(cols, col{s.indent, i + 1})
		case !at.item && s.item:
			cols = append(cols, col{s.key, i + 1})
		case !at.item:
			cols = append(cols, col{s.indent, i + 1})
		}
	}
	var above, below *col // the nearest columns right and left of the line's
	for i := range cols {
		c := &cols[i]
		switch {
		case c.col > at.indent && (above == nil || c.col < above.col):
			above = c
		case c.col < at.indent && (below == nil || c.col > below.col):
			below = c
		}
	}
	what := "keys"
	if at.item {
		what = "list items"
	}
	spaces := func(n int) string {
		if n == 1 {
			return "1 space"
		}
		return fmt.Sprintf("%d spaces", n)
	}
	head := fmt.Sprintf("check the indentation of line %d (%s)", n, spaces(at.indent))
	switch {
	case above != nil && below != nil:
		return fmt.Sprintf("%s: the %s above it are indented %d (line %d) and %d (line %d)",
			head, what, above.col, above.line, below.col, below.line)
	case above != nil:
		return fmt.Sprintf("%s: the %s above it are indented %d (line %d)", head, what, above.col, above.line)
	case below != nil:
		return fmt.Sprintf("%s: the %s above it are indented %d (line %d)", head, what, below.col, below.line)
	}
	return ""
}

// shape is a line's indentation: its first column, whether it is a list
// item, and the column of a list item's content.
type shape struct {
	indent, key int
	item        bool
}

// lineShape describes a line; false for a blank or comment line.
func lineShape(b []byte) (shape, bool) {
	s := strings.TrimRight(string(b), "\r\n")
	body := strings.TrimLeft(s, " ")
	if body == "" || strings.HasPrefix(body, "#") {
		return shape{}, false
	}
	sh := shape{indent: len(s) - len(body)}
	sh.key = sh.indent
	if body == "-" || strings.HasPrefix(body, "- ") {
		sh.item = true
		rest := strings.TrimLeft(body[1:], " ")
		sh.key = len(s) - len(rest)
	}
	return sh, true
}
