package e2e_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	ratelimittype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/refserver"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// TestSameAnswersAsReference sends the same requests to FastLimit and to
// envoyproxy/ratelimit at the pinned version (refserver.Bin), each on its
// own Redis and started with the same reference settings (headers and
// dynamic metadata on), over the project's rules files: config/, the
// Kubernetes example's and the chart's rules, e2e's drop-in rules and
// testdata/reference (every feature, also under SHADOW_MODE and
// QUOTA_MODE), and the reference's keys where they mean nothing
// (pkg/rules/testdata/refkeys). The requests are built from the rules: each rule counted
// past its limit, every rule of a domain in one request, hits_addend on
// the request and on a descriptor, a limit override, a descriptor no rule
// matches, an unknown domain. Codes, statuses, headers and the dynamic
// metadata keys both servers send must agree, but for the differences
// docs/migrating.md names (sameAnswer).
func TestSameAnswersAsReference(t *testing.T) {
	refserver.Bin(t)
	features := string(files.Read(t, "testdata/reference/features.yaml"))
	for _, tc := range []struct {
		name  string
		rules map[string]string
		env   map[string]string
	}{
		{"config", shippedRules(t), nil},
		{"kubernetes example", kubernetesRules(t), nil},
		{"chart", chartRules(t), nil},
		{"drop-in", map[string]string{"dropin.yaml": string(files.Read(t, "testdata/dropin.yaml"))}, nil},
		{"features", map[string]string{"features.yaml": features}, nil},
		{"features, SHADOW_MODE", map[string]string{"features.yaml": features}, map[string]string{"SHADOW_MODE": "true"}},
		{"features, QUOTA_MODE", map[string]string{"features.yaml": features}, map[string]string{"QUOTA_MODE": "true"}},
		{"keys the reference ignores", refKeyRules(t), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPair(t, tc.rules, tc.env)
			for _, seq := range sequences(t, tc.rules) {
				p.run(t, seq)
			}
			t.Logf("%d requests compared", p.compared)
		})
	}
}

// pair is FastLimit and the reference over the same rules.
type pair struct {
	fl       *fastlimit
	ref      *refserver.Server
	shadow   bool // SHADOW_MODE: the overall code is always OK
	compared int
}

// startPair starts both servers with rules and env besides
// refserver.Settings, each on a redis-server of its own.
func startPair(t *testing.T, rulesFiles, env map[string]string) *pair {
	t.Helper()
	ref := refserver.Start(t, refserver.Options{Rules: rulesFiles, Env: env})
	if err := ref.LoadError(); err != nil {
		t.Fatalf("the reference refuses the rules: %v", err)
	}
	tree := map[string]string{}
	for name, body := range rulesFiles {
		tree["ratelimit/config/"+name] = body
	}
	fenv := refEnv(t, files.Dir(t, tree), redistest.StartServer(t).Addr)
	for k, v := range refserver.Settings() {
		fenv[k] = v
	}
	// The harness's defaults for a start with flags: no drain, and a
	// store timeout a loaded machine does not reach.
	fenv["DRAIN"], fenv["STORE_TIMEOUT"] = "0s", "2s"
	for k, v := range env {
		fenv[k] = v
	}
	fl := start(t, launch{env: fenv, envOnly: true})
	return &pair{fl: fl, ref: ref, shadow: env["SHADOW_MODE"] == "true"}
}

// sequence is requests sent in order to both servers; build makes them
// with fresh values for each try, and unit is the shortest window they
// touch, in seconds: a sequence that straddles one of its windows' ends
// is sent again.
type sequence struct {
	name  string
	unit  int64
	build func(salt string) []*rls.RateLimitRequest
}

// run sends seq to both servers and compares every answer; a window end
// between its first and last request makes it try again with new values.
func (p *pair) run(t *testing.T, seq sequence) {
	t.Helper()
	for try := 0; ; try++ {
		if seq.unit == 1 { // start with a whole second ahead
			nextWindow(time.Second, 0)
		}
		start := time.Now().Unix() / seq.unit
		reqs := seq.build(fmt.Sprintf("%d-%d", time.Now().UnixNano(), try))
		var diffs []string
		for i, req := range reqs {
			fl, flErr := p.fl.Client.ShouldRateLimit(ctxTimeout(t, 10*time.Second), req)
			ref, refErr := p.ref.Client.ShouldRateLimit(ctxTimeout(t, 10*time.Second), req)
			if d := p.sameAnswer(fl, flErr, ref, refErr); d != "" {
				diffs = append(diffs, fmt.Sprintf("request %d (%d descriptors): %s", i, len(req.GetDescriptors()), d))
			}
		}
		if time.Now().Unix()/seq.unit != start && try < 5 {
			continue
		}
		p.compared += len(reqs)
		for _, d := range diffs {
			t.Errorf("%s, %s", seq.name, d)
		}
		return
	}
}

// sequences builds the requests of TestSameAnswersAsReference from the
// rules: per rule, hits past its limit (two values alternating at a
// wildcard level); per domain, all its rules in one request, with
// hits_addend on the request and on descriptors, and a limit override;
// and requests no rule answers.
func sequences(t *testing.T, rulesFiles map[string]string) []sequence {
	t.Helper()
	in := map[string][]byte{}
	for name, body := range rulesFiles {
		in[name] = []byte(body)
	}
	loaded, err := rules.Parse(in)
	if err != nil {
		t.Fatalf("FastLimit does not load the rules: %v", err)
	}
	byDomain := map[string][]*descriptors.Limit{}
	var domains []string
	for _, l := range loaded.Set.Limits() {
		d, _, _ := strings.Cut(l.Path, ".")
		if byDomain[d] == nil {
			domains = append(domains, d)
		}
		byDomain[d] = append(byDomain[d], l)
	}
	var seqs []sequence
	for _, d := range domains {
		limits := byDomain[d]
		shortest := int64(365 * 86400)
		for _, l := range limits {
			seqs = append(seqs, ruleSequence(d, l))
			if !l.Unlimited {
				shortest = min(shortest, windowSeconds(l))
			}
		}
		seqs = append(seqs, domainSequence(d, limits, shortest))
	}
	seqs = append(seqs, sequence{name: "unmatched", unit: 86400, build: func(salt string) []*rls.RateLimitRequest {
		return []*rls.RateLimitRequest{
			requestIn(domains[0], desc("no-such-key", salt)),
			requestIn("no-such-domain-"+salt, desc("k", "v")),
			requestIn(domains[0], desc(), desc("no-such-key", salt)),
		}
	}})
	return seqs
}

// ruleSequence counts l past its limit: limit+2 hits when small, else 3.
func ruleSequence(domain string, l *descriptors.Limit) sequence {
	hits := 3
	if !l.Unlimited && l.RequestsPerUnit <= 8 {
		hits = int(l.RequestsPerUnit) + 2
	}
	unit := int64(86400)
	if !l.Unlimited {
		unit = windowSeconds(l)
	}
	return sequence{name: "rule " + l.Path, unit: unit, build: func(salt string) []*rls.RateLimitRequest {
		var reqs []*rls.RateLimitRequest
		for i := range hits {
			reqs = append(reqs, requestIn(domain, matching(l, fmt.Sprintf("%s-%d", salt, i%2))))
		}
		return reqs
	}}
}

// domainSequence sends every rule of a domain in one request, then with
// hits_addend 2, with a descriptor's own hits_addend of 0 and 3, and a
// limit override.
func domainSequence(domain string, limits []*descriptors.Limit, unit int64) sequence {
	return sequence{name: "domain " + domain, unit: unit, build: func(salt string) []*rls.RateLimitRequest {
		all := func(alt string) *rls.RateLimitRequest {
			r := requestIn(domain)
			for _, l := range limits {
				r.Descriptors = append(r.Descriptors, matching(l, salt+alt))
			}
			return r
		}
		reqs := []*rls.RateLimitRequest{all(""), all("")}
		r := all("")
		r.HitsAddend = 2
		reqs = append(reqs, r)
		r = all("")
		r.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
		r.Descriptors[len(r.Descriptors)-1].HitsAddend = wrapperspb.UInt64(3)
		reqs = append(reqs, r, all("-other"))
		o := matching(limits[0], salt)
		o.Limit = &common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: ratelimittype.RateLimitUnit_HOUR}
		for range 3 {
			reqs = append(reqs, requestIn(domain, proto.Clone(o).(*common.RateLimitDescriptor)))
		}
		return reqs
	}}
}

// matching is a descriptor that l's rule matches: its exact values, and
// v-salt at key-only levels and for a wildcard's '*'.
func matching(l *descriptors.Limit, salt string) *common.RateLimitDescriptor {
	d := &common.RateLimitDescriptor{}
	for _, lv := range l.Levels {
		v := lv.Value
		switch {
		case v == "":
			v = "v-" + salt
		case strings.Contains(v, "*"):
			v = strings.ReplaceAll(v, "*", "w-"+salt)
		}
		d.Entries = append(d.Entries, &common.RateLimitDescriptor_Entry{Key: lv.Key, Value: v})
	}
	return d
}

// windowSeconds is l's window in seconds.
func windowSeconds(l *descriptors.Limit) int64 { return l.WindowMillis() / 1000 }

// shippedRules are the rules files under config/, as the reference reads
// a directory: every file, subdirectories too.
func shippedRules(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir("../config", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, rerr := os.ReadFile(p)
			out[strings.ReplaceAll(strings.TrimPrefix(p, "../config/"), "/", "_")] = string(b)
			return rerr
		}
		return err
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("rules under config/: %v %v", out, err)
	}
	return out
}

// refKeyRules are pkg/rules/testdata/refkeys: a file for each key of the
// reference's valid set in each mapping where it means nothing, which
// both servers load and ignore.
func refKeyRules(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../pkg/rules/testdata/refkeys/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("pkg/rules/testdata/refkeys: %v %v", paths, err)
	}
	out := map[string]string{}
	for _, p := range paths {
		out[filepath.Base(p)] = string(files.Read(t, p))
	}
	return out
}

// kubernetesRules are the data of examples/kubernetes' ConfigMap
// ratelimit-config, the rules files it mounts.
func kubernetesRules(t *testing.T) map[string]string {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(string(files.Read(t, "../examples/kubernetes/ratelimit-config.yaml"))))
	for {
		var cm struct {
			Kind     string
			Metadata struct{ Name string }
			Data     map[string]string
		}
		if err := dec.Decode(&cm); err != nil {
			t.Fatalf("no ConfigMap ratelimit-config: %v", err)
		}
		if cm.Kind == "ConfigMap" && cm.Metadata.Name == "ratelimit-config" {
			return cm.Data
		}
	}
}

// chartRules are the Helm chart's default rules (values.yaml's
// rules.defaultFiles, rendered when rules.files is empty).
func chartRules(t *testing.T) map[string]string {
	t.Helper()
	var values struct {
		Rules struct {
			Files map[string]string `yaml:"defaultFiles"`
		}
	}
	if err := yaml.Unmarshal(files.Read(t, "../charts/fastlimit/values.yaml"), &values); err != nil || len(values.Rules.Files) == 0 {
		t.Fatalf("the chart's rules: %v %v", values.Rules.Files, err)
	}
	return values.Rules.Files
}

// TestDynamicMetadataTable decides refserver's dynamic metadata table
// (what envoyproxy/ratelimit's main sends, read from its code: the pinned
// reference refuses rules with metadata) with the binary, in the
// reference's environment, one server per global mode.
func TestDynamicMetadataTable(t *testing.T) {
	servers := map[string]*fastlimit{}
	for _, c := range refserver.MetadataCases(t) {
		srv := servers[c.Mode]
		if srv == nil {
			root := files.Dir(t, map[string]string{"ratelimit/config/metadata.yaml": string(refserver.MetadataRules)})
			env := refEnv(t, root, redistest.StartServer(t).Addr)
			for k, v := range refserver.Settings() {
				env[k] = v
			}
			env["DRAIN"] = "0s"
			switch c.Mode {
			case "shadow":
				env["SHADOW_MODE"] = "true"
			case "quota":
				env["QUOTA_MODE"] = "true"
			}
			srv = start(t, launch{env: env, envOnly: true})
			servers[c.Mode] = srv
		}
		resp, err := srv.Client.ShouldRateLimit(ctxTimeout(t, 10*time.Second), c.Request)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if err := c.Check(resp); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
}
