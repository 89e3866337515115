package dashboard

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Errors of MetricNames.
var (
	ErrUnbalanced   = errors.New("unbalanced brackets")
	ErrUnterminated = errors.New("unterminated string")
	ErrUnexpected   = errors.New("unexpected character")
	ErrBadName      = errors.New("__name__ is not a metric name")
)

// aggregators are PromQL's aggregation operators, which may be followed
// by a by/without clause rather than by their arguments.
var aggregators = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// keywords are PromQL words that are never metric names.
var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "offset": true, "and": true, "or": true, "unless": true, "atan2": true,
	"inf": true, "nan": true,
}

// labelLists are the keywords followed by a parenthesised list of label
// names.
var labelLists = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// tokKind is the kind of a PromQL token.
type tokKind int

const (
	tokIdent tokKind = iota
	tokString
	tokNumber
	tokVar // a Grafana variable: $x, ${x}, [[x]]
	tokPunct
)

type token struct {
	kind tokKind
	text string // for tokString, the unquoted value
}

// MetricNames returns the metric names an expression selects, sorted and
// without repeats: every vector selector's name, and the value of a
// {__name__="..."} matcher. Function, aggregation and keyword names, label
// names and values, durations and Grafana variables are not metric names.
// It checks brackets and strings, not the whole grammar.
func MetricNames(expr string) ([]string, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	if err := balanced(toks); err != nil {
		return nil, err
	}
	var names []string
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.kind == tokPunct && t.text == "{":
			end := closing(toks, i)
			named, err := nameMatchers(toks[i+1 : end])
			if err != nil {
				return nil, err
			}
			names = append(names, named...)
			i = end
		case t.kind == tokPunct && t.text == "[":
			i = closing(toks, i)
		case t.kind == tokIdent:
			low := strings.ToLower(t.text)
			next := peek(toks, i+1)
			switch {
			case labelLists[low] && next.text == "(":
				i = closing(toks, i+1)
			case low == "offset":
				i++ // the duration
			case keywords[low]:
			case next.kind == tokPunct && next.text == "(":
				// A function or an aggregation's arguments.
			case aggregators[low] && (strings.EqualFold(next.text, "by") || strings.EqualFold(next.text, "without")):
			default:
				names = append(names, t.text)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// nameMatchers returns the values of __name__="..." matchers in the
// tokens between a selector's braces; a value that cannot be a metric
// name is an error.
func nameMatchers(toks []token) ([]string, error) {
	var out []string
	for i := 0; i+2 < len(toks); i++ {
		if toks[i].kind == tokIdent && toks[i].text == "__name__" && toks[i+1].text == "=" && toks[i+2].kind == tokString {
			v := toks[i+2].text
			if !validName(v) {
				return nil, fmt.Errorf("%w: %q", ErrBadName, v)
			}
			out = append(out, v)
		}
	}
	return out, nil
}

func validName(s string) bool {
	if s == "" || !isIdentStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isIdentChar(s[i]) {
			return false
		}
	}
	return true
}

func peek(toks []token, i int) token {
	if i < len(toks) {
		return toks[i]
	}
	return token{kind: tokPunct}
}

var pairs = map[string]string{"(": ")", "{": "}", "[": "]"}

// balanced checks that brackets nest.
func balanced(toks []token) error {
	var stack []string
	for _, t := range toks {
		if t.kind != tokPunct {
			continue
		}
		switch t.text {
		case "(", "{", "[":
			stack = append(stack, pairs[t.text])
		case ")", "}", "]":
			if len(stack) == 0 || stack[len(stack)-1] != t.text {
				return fmt.Errorf("%w: %q", ErrUnbalanced, t.text)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("%w: %q missing", ErrUnbalanced, stack[len(stack)-1])
	}
	return nil
}

// closing returns the index of the bracket closing the one at i; the
// tokens are balanced.
func closing(toks []token, i int) int {
	depth := 0
	for j := i; j < len(toks); j++ {
		if toks[j].kind != tokPunct {
			continue
		}
		switch toks[j].text {
		case "(", "{", "[":
			depth++
		case ")", "}", "]":
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(toks) - 1
}

// lex splits a PromQL expression, with Grafana's variables, into tokens.
func lex(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			v, n, err := lexString(s[i:])
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tokString, v})
			i += n
		case c == '$':
			n := lexVar(s[i:])
			toks = append(toks, token{tokVar, s[i : i+n]})
			i += n
		case c == '[' && strings.HasPrefix(s[i:], "[["):
			end := strings.Index(s[i:], "]]")
			if end < 0 {
				return nil, fmt.Errorf("%w: [[ without ]]", ErrUnbalanced)
			}
			toks = append(toks, token{tokVar, s[i : i+end+2]})
			i += end + 2
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			toks = append(toks, token{tokIdent, s[i:j]})
			i = j
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			// Numbers, hex, exponents and durations (5m, 1h30m).
			j := i + 1
			for j < len(s) && (isIdentChar(s[j]) || s[j] == '.' ||
				((s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E'))) {
				j++
			}
			toks = append(toks, token{tokNumber, s[i:j]})
			i = j
		default:
			n := punct(s[i:])
			if n == 0 {
				return nil, fmt.Errorf("%w %q at %d", ErrUnexpected, c, i)
			}
			toks = append(toks, token{tokPunct, s[i : i+n]})
			i += n
		}
	}
	return toks, nil
}

// lexString reads a quoted string at the start of s and returns its value
// (escapes kept as written) and length.
func lexString(s string) (string, int, error) {
	q := s[0]
	for j := 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return s[1:j], j + 1, nil
		}
	}
	return "", 0, fmt.Errorf("%w: %s", ErrUnterminated, s)
}

// lexVar returns the length of the Grafana variable at the start of s:
// $name or ${name[:format]}.
func lexVar(s string) int {
	if strings.HasPrefix(s, "${") {
		if end := strings.IndexByte(s, '}'); end > 0 {
			return end + 1
		}
		return 1
	}
	j := 1
	for j < len(s) && isIdentChar(s[j]) && s[j] != ':' {
		j++
	}
	return j
}

// punct returns the length of the operator or bracket at the start of s,
// or 0.
func punct(s string) int {
	for _, op := range []string{"==", "!=", "=~", "!~", "<=", ">="} {
		if strings.HasPrefix(s, op) {
			return 2
		}
	}
	if strings.IndexByte("(){}[],=+-*/%^<>@:", s[0]) >= 0 {
		return 1
	}
	return 0
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
