package metrics

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// regenerate is the command that rewrites the tables of docs/metrics.md.
const regenerate = "go test ./internal/observe/metrics -run TestDocsTable -update"

// withTables returns doc (docs/metrics.md) with each table of series,
// between its markers, generated anew.
func withTables(doc string) (string, error) {
	for _, t := range tables {
		start := "<!-- " + t.name + " series: generated from internal/observe/metrics; " + regenerate + " -->\n"
		end := "<!-- end of " + t.name + " series -->"
		before, rest, ok := strings.Cut(doc, start)
		_, after, ok2 := strings.Cut(rest, end)
		if !ok || !ok2 {
			return "", fmt.Errorf("the markers %q ... %q are missing", start, end)
		}
		doc = before + start + docsTable(t.name) + end + after
	}
	return doc, nil
}

// docsTable renders the table of series named name ("server",
// "connections", "rlqs") for docs/metrics.md, one row per definition.
func docsTable(name string) string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | exported | meaning |\n| --- | --- | --- | --- | --- |\n")
	for _, t := range tables {
		if t.name != name {
			continue
		}
		for _, d := range t.defs {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", d.name, d.kind, docLabels(d.labels), docWhen(d.when), docMeaning(d))
		}
	}
	return b.String()
}

func docLabels(labels []string) string {
	quoted := make([]string, len(labels))
	for i, l := range labels {
		quoted[i] = "`" + l + "`"
	}
	return strings.Join(quoted, ", ")
}

func docWhen(when string) string {
	if when == "" {
		return "always"
	}
	return when
}

// docMeaning is d's help, its histogram buckets and its link.
func docMeaning(d *def) string {
	s := d.help
	if n := len(d.buckets); n > 0 {
		s += fmt.Sprintf(" Buckets %s to %s.", seconds(d.buckets[0]), seconds(d.buckets[n-1]))
	}
	if d.see != "" {
		page, _, _ := strings.Cut(d.see, "#")
		if page == "" || page == "metrics.md" {
			s += fmt.Sprintf(" ([below](%s))", d.see[len(page):])
		} else {
			s += fmt.Sprintf(" ([%s](%s))", page, d.see)
		}
	}
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

func seconds(v float64) string { return time.Duration(math.Round(v * float64(time.Second))).String() }
