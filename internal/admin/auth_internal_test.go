package admin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
)

// Tokens of the tests, each of 16 bytes or more.
const (
	aliceToken = "alice-0123456789abcdef"
	bobToken   = "bob-0123456789abcdef"
)

// tokenVersions writes each version of a token file with its own
// modification time, so that each is a change whatever the file
// system's clock resolution.
type tokenVersions struct {
	t    *testing.T
	path string
	n    int
}

func (v *tokenVersions) write(body string) {
	v.t.Helper()
	files.Write(v.t, v.path, body)
	v.n++
	at := time.Unix(1_700_000_000+int64(v.n), 0)
	if err := os.Chtimes(v.path, at, at); err != nil {
		v.t.Fatal(err)
	}
}

// TestTokenRevocation: each version of the token file is taken whole or
// refused whole. Emptying it, commenting its tokens out or deleting it
// revokes every token; a malformed version (a bad line among good ones,
// a token under 16 bytes, a name twice) puts none in force, is logged
// once at error and counted, until a good version.
func TestTokenRevocation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	v := &tokenVersions{t: t, path: path}
	v.write("alice:" + aliceToken + "\nbob:" + bobToken + "\n")
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	m, err := metrics.NewAdmin(reg)
	if err != nil {
		t.Fatal(err)
	}
	f := newTokenFile(path, zap.New(core), m)
	gauge := func() float64 {
		return scrape.Value(t, gatherText(t, reg), "fastlimit_admin_tokens")
	}
	refusals := func() float64 {
		return scrape.Value(t, gatherText(t, reg), "fastlimit_admin_token_file_refused_total")
	}
	for _, step := range []struct {
		name    string
		write   string // "" writes nothing; "-" deletes the file
		valid   []string
		refused bool
	}{
		{"both tokens", "", []string{"alice", "bob"}, false},
		{"emptied", "\n", nil, false},
		{"bob back", "bob:" + bobToken + "\n", []string{"bob"}, false},
		{"commented out", "# bob:" + bobToken + "\n", nil, false},
		{"alice alone", "alice:" + aliceToken + "\n", []string{"alice"}, false},
		{"deleted", "-", nil, false},
		{"recreated", "alice:" + aliceToken + "\nbob:" + bobToken + "\n", []string{"alice", "bob"}, false},
		{"a bad line among good ones", "alice:" + aliceToken + "\nbob " + bobToken + "\n", nil, true},
		{"a short token", "alice:" + aliceToken + "\nbob:0123456789abcde\n", nil, true},
		{"a name twice", "alice:" + aliceToken + "\nalice:" + bobToken + "\n", nil, true},
		{"one token for two names", "alice:" + aliceToken + "\nbob:" + aliceToken + "\n", nil, true},
		{"a name that is no name", "alice:" + aliceToken + "\nb\x1bb:" + bobToken + "\n", nil, true},
		{"mended", "bob:" + bobToken + "\n", []string{"bob"}, false},
	} {
		switch step.write {
		case "":
		case "-":
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		default:
			v.write(step.write)
		}
		before := refusals()
		for _, who := range []struct{ name, token string }{{"alice", aliceToken}, {"bob", bobToken}} {
			name, ok, refused := f.lookup(who.token)
			want := strings.Contains(strings.Join(step.valid, ","), who.name)
			if ok != want || (ok && name != who.name) || refused != step.refused {
				t.Errorf("%s: %s's token: %q, %v, refused %v; want valid %v, refused %v", step.name, who.name, name, ok, refused, want, step.refused)
			}
		}
		if got := gauge(); got != float64(len(step.valid)) {
			t.Errorf("%s: fastlimit_admin_tokens = %v, want %d", step.name, got, len(step.valid))
		}
		if got, want := refusals()-before, map[bool]float64{true: 1}[step.refused]; got != want {
			t.Errorf("%s: %v refusals counted over two lookups, want %v", step.name, got, want)
		}
	}
	if got := refusals(); got != 5 {
		t.Errorf("fastlimit_admin_token_file_refused_total = %v, want 5 (one per version refused)", got)
	}
	refused := logs.FilterMessage("admin token file refused: no token is in force until it is mended").All()
	if len(refused) != 5 {
		t.Fatalf("%d refusal lines, want 5", len(refused))
	}
	for _, e := range refused {
		if e.Level != zapcore.ErrorLevel {
			t.Errorf("refusal at %s, want error", e.Level)
		}
	}
	if n := logs.FilterMessage("admin token file missing: no token is in force").Len(); n != 1 {
		t.Errorf("%d lines for the deleted file, want 1", n)
	}
	for _, e := range logs.All() {
		if line := e.Message + " " + fmtFields(e); strings.Contains(line, "0123456789") {
			t.Errorf("a token was logged: %s", line)
		}
	}
	// No lookup matches the empty token, whatever the file holds.
	if _, ok, _ := f.lookup(""); ok {
		t.Error("the empty token is valid")
	}
}

// TestTokenFileAtStart: a missing or malformed file at start puts no
// token in force and does not stop the server.
func TestTokenFileAtStart(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"missing": "", "malformed": "alice\n", "short": "alice:short\n", "empty": "# none\n"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if name != "missing" {
				files.Write(t, path, body)
			}
			reg := prometheus.NewRegistry()
			m, err := metrics.NewAdmin(reg)
			if err != nil {
				t.Fatal(err)
			}
			f := newTokenFile(path, zap.NewNop(), m)
			if _, ok, refused := f.lookup("alice"); ok || refused != (name == "malformed" || name == "short") {
				t.Errorf("lookup: valid %v, refused %v", ok, refused)
			}
			if got, want := scrape.Value(t, gatherText(t, reg), "fastlimit_admin_token_file_refused_total"), map[bool]float64{true: 1}[name == "malformed" || name == "short"]; got != want {
				t.Errorf("refused_total = %v, want %v", got, want)
			}
		})
	}
}

// gatherText is reg's series in the text format.
func gatherText(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func fmtFields(e observer.LoggedEntry) string { return fmt.Sprint(e.ContextMap()) }
