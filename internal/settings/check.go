package settings

import (
	"flag"
	"fmt"
	"io"
	"slices"
)

// rulesCheckFlags are the flags of `fastlimit check`: those that change
// which files load and how.
var rulesCheckFlags = []string{"config", "merge-domain-config", "rules-max-file-bytes", "rules-max-total-bytes", "rules-overlay"}

// ParseRules reads what `fastlimit check` needs, the rules layout: the
// rulesCheckFlags, their environment twins and the reference's RUNTIME_*
// variables, as Parse reads them. It reads no other setting and warns of
// none; -h lists these flags alone and returns flag.ErrHelp.
func ParseRules(name string, args []string, getenv func(string) string, out io.Writer) (RulesLayout, []string, error) {
	s := &Settings{}
	all := flag.NewFlagSet(name, flag.ContinueOnError)
	addRulesFlags(all, s)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	for _, n := range rulesCheckFlags {
		f := all.Lookup(n)
		fs.Var(f.Value, f.Name, f.Usage)
	}
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: %s [flags]\n\nValidates a rules directory as the server loads it, printing every error with file and line\n"+
			"(with --rules-overlay, the overlay of rules over xDS instead).\n"+
			"Each flag has an environment twin; without --config, the reference's RUNTIME_ROOT, RUNTIME_SUBDIRECTORY\n"+
			"and RUNTIME_APPDIRECTORY give the directory.\n\n", name)
		fs.PrintDefaults()
	}
	if err := s.parseFlags(fs, args, getenv); err != nil {
		return RulesLayout{}, nil, err
	}
	m := &refMapper{o: s, fs: fs, getenv: getenv}
	for _, mp := range refMappings {
		if slices.Contains(mp.flags, "config") {
			if err := m.apply(mp); err != nil {
				return RulesLayout{}, nil, fmt.Errorf("environment: %w", err)
			}
		}
	}
	return s.Rules(), s.warnings, nil
}
