// Package rules compiles rate-limit rules into a descriptors.Set: YAML
// rules files in envoyproxy/ratelimit's format plus FastLimit's extensions
// (docs/rules.md), read from a directory (Load, LoadWith) or given as bytes
// (Parse), or the RateLimitConfig resources of an xDS snapshot (FromXDS,
// FromAny), which an Overlay extends (FromXDSWith). Decoding is strict, and
// every problem is reported at once, each an *Error naming its file and
// line (or resource and descriptor path); what loads but is ignored is in
// Loaded.Warnings.
// The functions keep no state and are safe for concurrent use; a Loaded is
// immutable, its Hash telling whether a reload changes anything.
package rules

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// ErrNoFiles is returned when there is no rules file to load.
var ErrNoFiles = errors.New("no rules files")

// Loaded is a compiled rules directory.
type Loaded struct {
	Set *descriptors.Set
	// Hash is the hex SHA-256 of the sorted files' names and contents (or
	// resources): equal hashes mean equal rules.
	Hash  string
	Files []string // loaded, sorted, as named in errors
	// FromXDS marks rules of FromXDS, whose sorted Resources stand for Files.
	FromXDS   bool
	Resources []string
	// Warnings are what loaded but is ignored or may be a mistake (keys
	// of the reference where they mean nothing, an overlay's entries
	// that extend nothing), ordered by file and line.
	Warnings []*Error
	// Overlay is the file of the overlay FromXDSWith applied, if any, and
	// OverlayUnmatched the number of its entries that extend nothing.
	Overlay          string
	OverlayUnmatched int
}

// Load compiles the rules files of dir: its regular files (or symlinks to
// them, as a ConfigMap mount has) named *.yaml or *.yml, not dotfiles.
// A read failure, or a file over the size limits (an *Error wrapping
// ErrTooLarge), is returned alone; otherwise every rules error, each an
// *Error, joined with errors.Join.
func Load(dir string) (*Loaded, error) {
	return LoadWith(dir, Options{})
}

// Options say how LoadWith finds and combines rules files; the zero value
// is Load's. The layouts are envoyproxy/ratelimit's (docs/migrating.md).
type Options struct {
	// Tree loads every file under dir, at any depth, whatever its name,
	// following symlinks to files only; ".." names are never loaded.
	Tree bool
	// DotFiles, with Tree, loads dot names too (RUNTIME_IGNOREDOTFILES=false).
	DotFiles bool
	// Prefix, with Tree, keeps the files whose path under dir, '/' as '.',
	// starts with Prefix+"." (RUNTIME_WATCH_ROOT=true).
	Prefix string
	// MergeDomains merges the files of a domain (MERGE_DOMAIN_CONFIG):
	// their descriptors side by side, one repeated across them an error,
	// tenant_key alike where set, atomic if any sets it.
	MergeDomains bool
	// MaxFileBytes and MaxTotalBytes bound one file and all, checked before
	// reading (an *Error wrapping ErrTooLarge); 0 means the defaults, a
	// negative value no limit.
	MaxFileBytes, MaxTotalBytes int64
}

// LoadWith compiles the rules files of dir that o selects, as Load does.
func LoadWith(dir string, o Options) (*Loaded, error) {
	files, err := readFiles(dir, o)
	if err != nil {
		return nil, err
	}
	return compile(dir, files, o.MergeDomains)
}

// Parse compiles rules files given by name, whatever the names, as Load does.
func Parse(files map[string][]byte) (*Loaded, error) {
	return compile("", files, false)
}

// compile parses files (names relative to dir) and builds the Set.
func compile(dir string, files map[string][]byte, merge bool) (*Loaded, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("%w in '%s'", ErrNoFiles, dir)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	r := &Loaded{Hash: hash(names, files)}
	var (
		domains []descriptors.DomainConfig
		errs    []*Error
		warns   []*Error
		// files whose empty domain an error already reported
		domainReported = map[string]bool{}
		data           = map[string][]byte{} // by label
	)
	for _, name := range names {
		label := filepath.Join(dir, name)
		dc, d, reported := parseFile(label, files[name], false)
		if dc != nil {
			domains = append(domains, *dc)
		}
		errs = append(errs, d.errs...)
		warns = append(warns, d.warns...)
		domainReported[label] = reported
		data[label] = files[name]
		r.Files = append(r.Files, label)
	}
	if merge {
		var merrs []*Error
		domains, merrs = mergeDomains(domains)
		errs = append(errs, merrs...)
	}
	set, err := descriptors.NewSet(domains)
	pos := map[string]map[string]*positions{} // by file, recorded once it has an error
	for _, e := range fromSet(err, true) {
		if errors.Is(e.Err, descriptors.ErrEmptyDomain) && domainReported[e.File] {
			continue
		}
		if _, ok := pos[e.File]; !ok && data[e.File] != nil { // parsed again: only a load that fails pays
			_, d, _ := parseFile(e.File, data[e.File], true)
			pos[e.File] = d.pos
		}
		relocate(e, pos[e.File])
		if errors.Is(e.Err, descriptors.ErrDuplicateDomain) && !merge {
			e.Msg += "; files of one domain are merged only with --merge-domain-config (MERGE_DOMAIN_CONFIG=true)"
		}
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return nil, join(errs)
	}
	r.Set, r.Warnings = set, sorted(warns)
	return r, nil
}

// hash returns the hex SHA-256 of each name and content, length-prefixed.
func hash(names []string, files map[string][]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, name := range names {
		for _, b := range [][]byte{[]byte(name), files[name]} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Fingerprint returns the Hash Load would give dir's rules, without parsing.
func Fingerprint(dir string) (string, error) {
	return FingerprintWith(dir, Options{})
}

// FingerprintWith is Fingerprint for LoadWith.
func FingerprintWith(dir string, o Options) (string, error) {
	files, err := readFiles(dir, o)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	return hash(names, files), nil
}

// readFiles reads the rules files of dir as o says, keyed by name.
func readFiles(dir string, o Options) (map[string][]byte, error) {
	if o.Tree {
		return readTree(dir, o, newFileReader(o))
	}
	return readDir(dir, newFileReader(o))
}

// IsRulesName reports whether LoadWith reads an entry of that name (a file,
// or with Tree also a directory).
func (o Options) IsRulesName(name string) bool {
	if !o.Tree {
		return IsRulesName(name)
	}
	return !strings.HasPrefix(name, "..") && (o.DotFiles || !strings.HasPrefix(name, "."))
}

// IsRulesName reports whether Load reads a file of that name.
func IsRulesName(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

// readDir reads the rules files of dir with r, keyed by name.
func readDir(dir string, r *fileReader) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	files := make(map[string][]byte)
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		ok, err := isRulesFile(path, e)
		if err != nil {
			return nil, fmt.Errorf("read rules: %w", err)
		}
		if !ok {
			continue
		}
		b, err := r.read(path)
		if err != nil {
			return nil, readError(err)
		}
		files[e.Name()] = b
	}
	return files, nil
}

// readError wraps fileReader.read's file system errors; a size refusal stays as it is.
func readError(err error) error {
	if errors.Is(err, ErrTooLarge) {
		return err
	}
	return fmt.Errorf("read rules: %w", err)
}

// isRulesFile reports whether the entry at path is a rules file, following a symlink.
func isRulesFile(path string, e fs.DirEntry) (bool, error) {
	if !IsRulesName(e.Name()) {
		return false, nil
	}
	switch {
	case e.Type().IsRegular():
		return true, nil
	case e.Type()&fs.ModeSymlink != 0:
		fi, err := os.Stat(path)
		if err != nil {
			return false, err
		}
		return fi.Mode().IsRegular(), nil
	}
	return false, nil
}
