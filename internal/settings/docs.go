package settings

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// FlagsTable renders docs/settings.md's tables of flags, one per group:
// each flag's environment twin, the reference's variables that set it
// (refVars), its default and meaning, as -h prints them.
func FlagsTable() string {
	var b strings.Builder
	fs := flag.NewFlagSet("docs", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s, seen := &Settings{}, map[string]bool{}
	for _, g := range flagGroups {
		g.add(fs, s)
		fmt.Fprintf(&b, "\n### %s\n\n%s| flag | environment | envoyproxy/ratelimit | default | meaning |\n| --- | --- | --- | --- | --- |\n",
			g.title, groupNotes[g.title])
		fs.VisitAll(func(f *flag.Flag) {
			if seen[f.Name] {
				return
			}
			seen[f.Name] = true
			def := "`" + f.DefValue + "`"
			if f.DefValue == "" {
				def = ""
			}
			fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s | %s |\n", f.Name, EnvName(f.Name), refCell(f.Name), def, escapeCell(f.Usage))
		})
	}
	b.WriteString("\n")
	return b.String()
}

// refCell lists the reference's variables that set flag: its twin, or
// those mapped onto it (docs/migrating.md says how).
func refCell(flag string) string {
	var names []string
	for _, v := range refVars {
		if v.flag == flag && (v.how == refTwin || v.how == refMapped) {
			names = append(names, "`"+v.name+"`")
		}
	}
	return strings.Join(names, ", ")
}

// RefTable renders the table of envoyproxy/ratelimit's variables and
// what FastLimit does with each, for docs/migrating.md.
func RefTable() string {
	var b strings.Builder
	b.WriteString("| variable | FastLimit | notes | checked against |\n| --- | --- | --- | --- |\n")
	for _, v := range refVars {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.name, refStatus(v), v.note, v.checkedAgainst())
	}
	return b.String()
}

func refStatus(v refVar) string {
	switch v.how {
	case refTwin:
		return "honoured: `--" + v.flag + "`"
	case refMapped:
		return "honoured: sets `--" + v.flag + "`"
	case refWarned:
		if v.fine.doc != "" {
			return "accepted with a warning (none when " + v.fine.doc + ")"
		}
		return "accepted with a warning"
	default:
		if v.fine.except {
			return "refused when " + v.fine.doc
		}
		if v.fine.doc != "" {
			return "refused unless " + v.fine.doc
		}
		return "refused"
	}
}

// escapeCell keeps a flag's usage in one Markdown table cell.
func escapeCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
