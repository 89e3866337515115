package rules_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// sizedRules returns a valid rules file of domain d, padded with a
// comment to exactly n bytes (n >= 80).
func sizedRules(t testing.TB, d string, n int) []byte {
	t.Helper()
	b := fmt.Appendf(nil, "domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n#", d)
	if len(b)+1 > n {
		t.Fatalf("a rules file of %d bytes is too small", n)
	}
	b = append(b, strings.Repeat("x", n-len(b)-1)...)
	return append(b, '\n')
}

// writeSized writes files (path under dir -> size) of sized rules.
func writeSized(t testing.TB, dir string, sizes map[string]int) {
	t.Helper()
	for name, n := range sizes {
		d := strings.NewReplacer("/", "_", ".", "_").Replace(name)
		files.Write(t, filepath.Join(dir, filepath.FromSlash(name)), sizedRules(t, d, n))
	}
}

// checkTooLarge checks that err refuses file (relative to dir) for
// ErrTooLarge, naming it and the limit.
func checkTooLarge(t *testing.T, err error, dir, file string, limit int64) {
	t.Helper()
	var re *rules.Error
	switch {
	case !errors.Is(err, rules.ErrTooLarge) || !errors.As(err, &re):
		t.Fatalf("err = %v, want an *Error wrapping ErrTooLarge", err)
	case re.File != filepath.Join(dir, filepath.FromSlash(file)):
		t.Errorf("refused %q, want %q", re.File, file)
	case !strings.Contains(err.Error(), fmt.Sprintf("limit of %d bytes", limit)):
		t.Errorf("error %q does not name the limit %d", err, limit)
	}
}

func TestSizeLimits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tree      bool
		files     map[string]int
		maxFile   int64
		maxTotal  int64
		refused   string // "" when the rules load
		limit     int64  // the limit named
		wantFiles int
	}{
		{name: "at the file limit", files: map[string]int{"a.yaml": 1000, "b.yaml": 999}, maxFile: 1000, wantFiles: 2},
		{name: "one byte over the file limit", files: map[string]int{"a.yaml": 1000, "b.yaml": 1001}, maxFile: 1000,
			refused: "b.yaml", limit: 1000},
		{name: "at the total limit", files: map[string]int{"a.yaml": 600, "b.yaml": 400}, maxTotal: 1000, wantFiles: 2},
		{name: "the file that passes the total", files: map[string]int{"a.yaml": 600, "b.yaml": 401, "c.yaml": 100},
			maxTotal: 1000, refused: "b.yaml", limit: 1000},
		{name: "no limits", files: map[string]int{"a.yaml": 5000, "b.yaml": 5000}, maxFile: -1, maxTotal: -1,
			wantFiles: 2},
		{name: "files that are not rules do not count", files: map[string]int{"a.yaml": 900, "notes.txt": 5000},
			maxFile: 1000, maxTotal: 1000, wantFiles: 1},
		{name: "tree: over the file limit deep down", tree: true,
			files: map[string]int{"a/b/c/big": 2000, "a/small": 100}, maxFile: 1000, refused: "a/b/c/big", limit: 1000},
		{name: "tree: the total", tree: true, files: map[string]int{"x/one": 700, "y/two": 700}, maxTotal: 1200,
			refused: "y/two", limit: 1200},
		{name: "tree: within", tree: true, files: map[string]int{"x/one": 700, "y/two": 500}, maxFile: 700,
			maxTotal: 1200, wantFiles: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeSized(t, dir, tc.files)
			o := rules.Options{Tree: tc.tree, MaxFileBytes: tc.maxFile, MaxTotalBytes: tc.maxTotal, MergeDomains: true}
			r, err := rules.LoadWith(dir, o)
			_, ferr := rules.FingerprintWith(dir, o)
			if tc.refused == "" {
				if err != nil || ferr != nil {
					t.Fatalf("LoadWith: %v; FingerprintWith: %v", err, ferr)
				}
				if len(r.Files) != tc.wantFiles {
					t.Errorf("loaded %d files, want %d", len(r.Files), tc.wantFiles)
				}
				return
			}
			checkTooLarge(t, err, dir, tc.refused, tc.limit)
			checkTooLarge(t, ferr, dir, tc.refused, tc.limit)
		})
	}
}

// TestSizeLimitsBeforeReading refuses sparse files of 1 GiB, flat, through
// a symlink and in a tree, with the default limits, without reading them:
// the loader allocates far less than the file's size.
func TestSizeLimitsBeforeReading(t *testing.T) {
	const huge = 1 << 30
	for _, tc := range []struct {
		name string
		tree bool
		file string // the path refused, relative to the directory
		make func(t *testing.T, dir, sparse string)
	}{
		{"flat", false, "big.yaml", func(t *testing.T, dir, sparse string) {
			mustRename(t, sparse, filepath.Join(dir, "big.yaml"))
		}},
		{"symlink", false, "big.yaml", func(t *testing.T, dir, sparse string) {
			if err := os.Symlink(sparse, filepath.Join(dir, "big.yaml")); err != nil {
				t.Fatal(err)
			}
		}},
		{"tree", true, "deep/er/big", func(t *testing.T, dir, sparse string) {
			if err := os.MkdirAll(filepath.Join(dir, "deep", "er"), 0o755); err != nil {
				t.Fatal(err)
			}
			mustRename(t, sparse, filepath.Join(dir, "deep", "er", "big"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, other := t.TempDir(), t.TempDir()
			writeSized(t, dir, map[string]int{"a.yaml": 200})
			sparse := filepath.Join(other, "sparse")
			f, err := os.Create(sparse)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(huge); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			tc.make(t, dir, sparse)

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err = rules.LoadWith(dir, rules.Options{Tree: tc.tree})
			runtime.ReadMemStats(&after)
			checkTooLarge(t, err, dir, tc.file, rules.DefaultMaxFileBytes)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("refusing a %d-byte file allocated %d bytes: it was read", huge, alloc)
			}
		})
	}
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// FuzzSizeLimits checks the limits against a model: with files of the
// given sizes read in name order, the first file over the file limit, or
// taking the running total over the total limit, is refused, and nothing
// is refused otherwise.
func FuzzSizeLimits(f *testing.F) {
	f.Add([]byte{10, 20, 30}, int16(25), int16(100))
	f.Add([]byte{10, 20, 30}, int16(40), int16(50))
	f.Add([]byte{255, 0, 1}, int16(-1), int16(0))
	f.Add([]byte{}, int16(1), int16(1))
	f.Fuzz(func(t *testing.T, sizes []byte, maxFile, maxTotal int16) {
		if len(sizes) > 8 {
			sizes = sizes[:8]
		}
		dir := t.TempDir()
		for i, s := range sizes {
			files.Write(t, filepath.Join(dir, fmt.Sprintf("f%d.yaml", i)), make([]byte, int(s)*7))
		}
		o := rules.Options{MaxFileBytes: int64(maxFile), MaxTotalBytes: int64(maxTotal)}
		_, err := rules.FingerprintWith(dir, o)

		fileLimit, totalLimit := int64(maxFile), int64(maxTotal)
		if fileLimit == 0 {
			fileLimit = rules.DefaultMaxFileBytes
		}
		if totalLimit == 0 {
			totalLimit = rules.DefaultMaxTotalBytes
		}
		want, total := -1, int64(0)
		for i, s := range sizes {
			n := int64(s) * 7
			total += n
			if (fileLimit > 0 && n > fileLimit) || (totalLimit > 0 && total > totalLimit) {
				want = i
				break
			}
		}
		var re *rules.Error
		switch {
		case want < 0 && err != nil:
			t.Fatalf("sizes %v, limits %d/%d: %v, want no refusal", sizes, maxFile, maxTotal, err)
		case want >= 0 && (!errors.Is(err, rules.ErrTooLarge) || !errors.As(err, &re)):
			t.Fatalf("sizes %v, limits %d/%d: %v, want f%d.yaml refused", sizes, maxFile, maxTotal, err, want)
		case want >= 0 && re.File != filepath.Join(dir, fmt.Sprintf("f%d.yaml", want)):
			t.Fatalf("sizes %v, limits %d/%d: refused %s, want f%d.yaml", sizes, maxFile, maxTotal, re.File, want)
		}
	})
}
