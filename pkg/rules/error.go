package rules

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// Error is one problem in a rules file.
type Error struct {
	File string
	// Line is 1-based; 0 when the problem has no line.
	Line int
	Msg  string
	// Err is the underlying error, if any, such as one wrapping
	// descriptors.ErrDuplicatePath.
	Err error
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// source is the position of a node as descriptors.Descriptor.Source holds it.
func source(file string, n *yaml.Node) string {
	return file + ":" + strconv.Itoa(n.Line)
}

// fromSet turns the joined *descriptors.Error values of NewSet into *Error
// values. With lines, a "file:line" source is split into File and Line (a
// rules file); without, File is the whole source (an xDS resource and
// descriptor path).
func fromSet(err error, lines bool) []*Error {
	if err == nil {
		return nil
	}
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	errs := make([]*Error, len(list))
	for i, e := range list {
		errs[i] = &Error{Msg: e.Error(), Err: e}
		var de *descriptors.Error
		if !errors.As(e, &de) {
			continue
		}
		errs[i].File, errs[i].Msg, errs[i].Err = de.Source, de.Err.Error(), de.Err
		if lines {
			errs[i].File, errs[i].Line = splitSource(de.Source)
		}
	}
	return errs
}

// splitSource splits a "file:line" source; one without a line is all file.
func splitSource(source string) (file string, line int) {
	if j := strings.LastIndexByte(source, ':'); j >= 0 {
		if n, err := strconv.Atoi(source[j+1:]); err == nil {
			return source[:j], n
		}
	}
	return source, 0
}

// yamlLine matches the position yaml.v3 puts in its messages.
var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// yamlErrors turns a yaml.v3 error, if any, into *Error values for file.
// A *yaml.TypeError holds one message per problem.
func yamlErrors(file string, err error) []*Error {
	if err == nil {
		return nil
	}
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	errs := make([]*Error, len(msgs))
	for i, msg := range msgs {
		e := &Error{File: file, Msg: msg}
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Msg = msg[len(m[0]):]
		}
		e.Msg = "invalid YAML: " + strings.TrimPrefix(e.Msg, "yaml: ")
		errs[i] = e
	}
	return errs
}

// sorted orders errs by file and line, keeping the order of errors at the
// same place.
func sorted(errs []*Error) []*Error {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	return errs
}

// join orders errs by file and line, keeping the order of errors at the
// same place, and joins them into one error.
func join(errs []*Error) error {
	sorted(errs)
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}

// Flatten lists the leaves of a joined error, such as LoadWith returns:
// each *Error (or the one read failure) on its own.
func Flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Flatten(e)...)
		}
		return out
	}
	return []error{err}
}
