package settings

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated tables in docs/")

// TestDocsTables keeps the generated tables of docs/ in step with the
// flags and the table of the reference's variables.
func TestDocsTables(t *testing.T) {
	for _, tc := range []struct {
		file, what string
		table      func() string
	}{
		{"settings.md", "flags", FlagsTable},
		{"migrating.md", "reference variables", RefTable},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("..", "..", "docs", tc.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			start := "<!-- " + tc.what + ": generated from internal/settings; go test ./internal/settings -run TestDocsTables -update -->\n"
			end := "<!-- end of " + tc.what + " -->"
			doc := string(b)
			i, j := strings.Index(doc, start), strings.Index(doc, end)
			if i < 0 || j < i {
				t.Fatalf("%s lacks the markers %q ... %q", path, start, end)
			}
			want := tc.table()
			if got := doc[i+len(start) : j]; got != want {
				if *update {
					if err := os.WriteFile(path, []byte(doc[:i+len(start)]+want+doc[j:]), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				t.Errorf("%s: the table of %s is stale: run go test ./internal/settings -run TestDocsTables -update", path, tc.what)
			}
		})
	}
}

// TestFlagsTableHasEveryFlag checks that the table lists each flag once,
// with its twin.
func TestFlagsTableHasEveryFlag(t *testing.T) {
	table := FlagsTable()
	fs := newFlagSet("test", &Settings{}, nil)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		row := "| `--" + f.Name + "` | `" + EnvName(f.Name) + "` |"
		if strings.Count(table, row) != 1 {
			t.Errorf("--%s: %d rows, want 1", f.Name, strings.Count(table, row))
		}
	})
	if rows := strings.Count(table, "\n| `--"); rows != n {
		t.Errorf("%d rows for %d flags", rows, n)
	}
}
