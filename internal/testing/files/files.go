// Package files lays out files for tests: one file, a tree of them, an
// atomic replacement, and a Kubernetes volume swapped as the kubelet
// swaps ConfigMaps and Secrets; and reads one back.
package files

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Write writes data to path, creating its directory.
func Write[T string | []byte](t testing.TB, path string, data T) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Read returns the content of path, or fails t.
func Read(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Tree writes files (a path relative to dir -> its content) into dir and
// returns dir. A content that starts with "-> " makes a symlink to the
// rest.
func Tree(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	for name, body := range files {
		path := filepath.Join(dir, name)
		target, link := strings.CutPrefix(body, "-> ")
		if !link {
			Write(t, path, body)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Dir writes files into a fresh temporary directory, as Tree does, and
// returns it.
func Dir(t testing.TB, files map[string]string) string {
	t.Helper()
	return Tree(t, t.TempDir(), files)
}

// Replace replaces path atomically, as docs/operations.md advises: a
// temporary dotfile beside it, renamed into place.
func Replace(t testing.TB, path, body string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	Write(t, tmp, body)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Volume lays files out in dir as Kubernetes mounts a ConfigMap or a
// Secret: the files in a timestamped directory, a "..data" symlink to it
// and, for each file, a symlink name -> ..data/name. Called again on the
// same dir, it swaps "..data" atomically to a new directory, as the
// kubelet does on an update, and removes the old one.
func Volume[T string | []byte](t testing.TB, dir string, files map[string]T) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	ts, err := os.MkdirTemp(dir, "..ts_")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		Write(t, filepath.Join(ts, name), data)
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
