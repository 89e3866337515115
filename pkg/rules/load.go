// Package rules loads rate-limit rules files, or the RateLimitConfig
// resources of an xDS snapshot, into a descriptors.Set.
//
// A rules directory holds one YAML file per domain, in the format of
// envoyproxy/ratelimit plus FastLimit's extensions (tenant_key, atomic,
// algorithm, unit_multiplier, burst, cost). Decoding is strict: unknown keys
// and wrong types are errors, and every error carries its file and line
// (for xDS resources, the resource and descriptor path).
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

// ErrNoFiles is returned when there is no rules file to load: an empty
// directory is far more often a wrong path than an intent to limit nothing.
var ErrNoFiles = errors.New("no rules files")

// Loaded is a compiled rules directory.
type Loaded struct {
	Set *descriptors.Set
	// Hash is the hex SHA-256 over the sorted (name, content) pairs of the
	// files, names relative to the directory. Equal hashes mean equal rules,
	// so a reload can skip a no-op and metrics can export which rules run.
	Hash string
	// Files are the files loaded, sorted, as named in errors.
	Files []string
	// FromXDS marks rules compiled by FromXDS from an xDS snapshot; their
	// Resources name the snapshot's resources, sorted, and Files is empty.
	FromXDS   bool
	Resources []string
}

// Load reads every rules file in dir and compiles them. Rules files are
// the regular files, or symlinks to regular files, directly in dir whose
// names end in .yaml or .yml and do not start with a dot; subdirectories
// are not read. Symlinks are followed, so a Kubernetes ConfigMap mount
// (visible files linking into a swapped "..data" directory) loads as is.
//
// A read failure is returned alone, as is a file over the size limits (an
// *Error wrapping ErrTooLarge; see Options). Otherwise Load reports every
// rules error it finds, each a *Error, joined with errors.Join.
func Load(dir string) (*Loaded, error) {
	return LoadWith(dir, Options{})
}

// Options say how LoadWith finds and combines rules files. The zero value
// is Load's layout.
type Options struct {
	// Tree loads the files as envoyproxy/ratelimit's runtime loader finds
	// them: every file under dir, in subdirectories at any depth, whatever
	// its name. Symlinks to files are followed, symlinks to directories
	// are not (the reference skips them too). Names starting with ".."
	// (a Kubernetes ConfigMap's "..data" and timestamped directories)
	// are never loaded, so that a ConfigMap mount loads each file once.
	Tree bool
	// DotFiles, with Tree, also loads files and directories whose names
	// start with a dot (the reference's RUNTIME_IGNOREDOTFILES=false).
	DotFiles bool
	// Prefix, with Tree, keeps only the files whose key starts with
	// Prefix+".", a file's key being its path under dir with '/' as '.':
	// the reference's RUNTIME_WATCH_ROOT=true layout, where dir is
	// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY and Prefix $RUNTIME_APPDIRECTORY.
	// That is the tree of the entry named Prefix plus the entries whose
	// names start with Prefix+".".
	Prefix string
	// MergeDomains merges files of one domain, as the reference's
	// MERGE_DOMAIN_CONFIG does: their top-level descriptors are loaded
	// side by side, in the order of the files' names, and a descriptor
	// repeated across them is an error. A domain's tenant_key must be the
	// same in every file that sets it; atomic holds if any file sets it.
	// Without it, a domain in two files is an error.
	MergeDomains bool
	// MaxFileBytes refuses a rules file larger than this many bytes, and
	// MaxTotalBytes a directory whose rules files hold more in all (the
	// file that passes it is named), with an *Error wrapping ErrTooLarge.
	// Sizes are checked before a file is read. 0 means
	// DefaultMaxFileBytes and DefaultMaxTotalBytes; a negative value means
	// no limit.
	MaxFileBytes, MaxTotalBytes int64
}

// LoadWith reads the rules files of dir that o selects and compiles them,
// as Load does.
func LoadWith(dir string, o Options) (*Loaded, error) {
	files, err := readFiles(dir, o)
	if err != nil {
		return nil, err
	}
	return compile(dir, files, o.MergeDomains)
}

// Parse compiles in-memory rules files, keyed by file name, as Load does
// once it has read them. Every file is parsed, whatever its name.
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
	)
	for _, name := range names {
		label := filepath.Join(dir, name)
		dc, ferrs := parseFile(label, files[name])
		if dc != nil {
			domains = append(domains, *dc)
		}
		errs = append(errs, ferrs...)
		r.Files = append(r.Files, label)
	}
	if merge {
		var merrs []*Error
		domains, merrs = mergeDomains(domains)
		errs = append(errs, merrs...)
	}
	set, err := descriptors.NewSet(domains)
	errs = append(errs, fromSet(err, true)...)
	if len(errs) > 0 {
		return nil, join(errs)
	}
	r.Set = set
	return r, nil
}

// hash returns the hex SHA-256 over each name and content, in the order of
// names, each length-prefixed so that no two file sets encode alike.
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

// Fingerprint returns the Hash that Load would give dir's rules, from the
// same files, without parsing them: equal fingerprints mean the rules
// files did not change.
func Fingerprint(dir string) (string, error) {
	return FingerprintWith(dir, Options{})
}

// FingerprintWith returns the Hash that LoadWith would give dir's rules
// read as o says, without parsing them.
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

// readFiles reads the rules files of dir as o says, keyed by name. A file
// over o's size limits is refused before it is read.
func readFiles(dir string, o Options) (map[string][]byte, error) {
	if o.Tree {
		return readTree(dir, o, newFileReader(o))
	}
	return readDir(dir, newFileReader(o))
}

// IsRulesName reports whether a directory entry named name is read as a
// rules file (or, with Tree, as part of the rules tree), if it is a
// regular file or a symlink to one.
func (o Options) IsRulesName(name string) bool {
	if !o.Tree {
		return IsRulesName(name)
	}
	return !strings.HasPrefix(name, "..") && (o.DotFiles || !strings.HasPrefix(name, "."))
}

// IsRulesName reports whether a directory entry named name is read as a
// rules file, if it is a regular file or a symlink to one.
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

// readError wraps an error of fileReader.read: a size refusal is returned
// as the *Error it is, a file system error with context.
func readError(err error) error {
	if errors.Is(err, ErrTooLarge) {
		return err
	}
	return fmt.Errorf("read rules: %w", err)
}

// isRulesFile reports whether the directory entry at path is a rules file,
// following a symlink. Names starting with a dot, including Kubernetes'
// "..data" entries, are never rules files.
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
