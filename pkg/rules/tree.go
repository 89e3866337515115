package rules

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// readTree reads the files of dir that o selects (o.Tree) with r, keyed by
// their paths relative to dir, with '/' separators.
func readTree(dir string, o Options, r *fileReader) (map[string][]byte, error) {
	files := make(map[string][]byte)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if o.Prefix != "" && name != o.Prefix && !strings.HasPrefix(name, o.Prefix+".") {
			continue
		}
		if err := walkTree(dir, name, e, o.DotFiles, r, files); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// walkTree reads the entry rel of dir into files: a file, or a directory's
// files at any depth.
func walkTree(dir, rel string, e fs.DirEntry, dotFiles bool, r *fileReader, files map[string][]byte) error {
	name := e.Name()
	if strings.HasPrefix(name, "..") || (!dotFiles && strings.HasPrefix(name, ".")) {
		return nil
	}
	path := filepath.Join(dir, rel)
	switch {
	case e.IsDir():
		entries, err := os.ReadDir(path)
		if err != nil {
			return fmt.Errorf("read rules: %w", err)
		}
		for _, c := range entries {
			if err := walkTree(dir, rel+"/"+c.Name(), c, dotFiles, r, files); err != nil {
				return err
			}
		}
		return nil
	case e.Type().IsRegular():
	case e.Type()&fs.ModeSymlink != 0:
		fi, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("read rules: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return nil // a link to a directory, which the reference does not follow either
		}
	default:
		return nil
	}
	b, err := r.read(path)
	if err != nil {
		return readError(err)
	}
	files[rel] = b
	return nil
}

// mergeDomains merges the configs of each domain into the first one, in
// order (Options.MergeDomains).
func mergeDomains(domains []descriptors.DomainConfig) ([]descriptors.DomainConfig, []*Error) {
	var (
		out  []descriptors.DomainConfig
		errs []*Error
	)
	at := map[string]int{}
	for _, dc := range domains {
		i, seen := at[dc.Name]
		if !seen || dc.Name == "" {
			at[dc.Name] = len(out)
			out = append(out, dc)
			continue
		}
		m := &out[i]
		switch {
		case m.TenantKey == "":
			m.TenantKey = dc.TenantKey
		case dc.TenantKey != "" && dc.TenantKey != m.TenantKey:
			errs = append(errs, sourceError(dc.Source, fmt.Sprintf(
				"tenant_key '%s' of domain '%s' differs from '%s' (at %s); merged files must agree",
				dc.TenantKey, dc.Name, m.TenantKey, m.Source)))
		}
		m.AllOrNothing = m.AllOrNothing || dc.AllOrNothing
		m.Descriptors = append(m.Descriptors[:len(m.Descriptors):len(m.Descriptors)], dc.Descriptors...)
	}
	return out, errs
}

// sourceError is an *Error at a "file:line" source.
func sourceError(source, msg string) *Error {
	file, line := splitSource(source)
	return &Error{File: file, Line: line, Msg: msg}
}
