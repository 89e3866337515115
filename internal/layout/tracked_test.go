package layout_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTracked is the largest file the repository may track.
const maxTracked = 1 << 20

// magics start the executables that a build leaves behind: ELF, Mach-O
// (both byte orders, 32 and 64 bit, fat), PE and WebAssembly.
var magics = [][]byte{
	{0x7f, 'E', 'L', 'F'},
	{0xfe, 0xed, 0xfa, 0xce}, {0xce, 0xfa, 0xed, 0xfe},
	{0xfe, 0xed, 0xfa, 0xcf}, {0xcf, 0xfa, 0xed, 0xfe},
	{0xca, 0xfe, 0xba, 0xbe},
	{'M', 'Z'},
	{0x00, 'a', 's', 'm'},
}

// TestNothingBuiltTracked fails on a tracked file over 1 MiB or a tracked
// executable binary: build output belongs in .gitignore, not in clones.
func TestNothingBuiltTracked(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	dir := strings.TrimSpace(string(root))
	out, err := exec.Command("git", "-C", dir, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if problem := checkTracked(filepath.Join(dir, name)); problem != "" {
			t.Errorf("%s is tracked: %s", name, problem)
		}
	}
}

// checkTracked says what is wrong with tracking path, or "".
func checkTracked(path string) string {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return "" // deleted in the work tree, or a symlink
	}
	if fi.Size() > maxTracked {
		return "it is over 1 MiB"
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := f.Read(head)
	for _, m := range magics {
		if n >= len(m) && bytes.Equal(head[:len(m)], m) && isBinary(path) {
			return "it is an executable binary"
		}
	}
	return ""
}

// isBinary reports whether path holds a NUL byte in its first 8 KiB, so
// that a text file that happens to start with "MZ" is not taken for one.
func isBinary(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	return bytes.IndexByte(b[:min(len(b), 8192)], 0) >= 0
}

// TestCheckTracked proves the check on files made for it.
func TestCheckTracked(t *testing.T) {
	dir := t.TempDir()
	elf, err := os.Executable() // this test binary
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(elf)
	if err != nil {
		t.Fatal(err)
	}
	small := append(append([]byte{}, exe[:4]...), make([]byte, 100)...)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"text.go", []byte("package x\n"), ""},
		{"mz.txt", []byte("MZ is a text file\n"), ""},
		{"big.json", bytes.Repeat([]byte("a"), maxTracked+1), "over 1 MiB"},
		{"small-binary", small, "executable binary"},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, tc.data, 0o755); err != nil {
			t.Fatal(err)
		}
		got := checkTracked(path)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: checkTracked = %q, want %q", tc.name, got, tc.want)
		}
	}
}
