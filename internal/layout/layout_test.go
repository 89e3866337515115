package layout_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/fastlimit/fastlimit/"

// layers ranks the project's packages: a package may import only
// packages of lower layers. The product (cmd, internal/ but its testing
// folder, pkg/, lua) comes first; then the test support of
// internal/testing, which the product's own tests import and the product
// never does; then the benchmark tools of bench/; then the tests that are
// packages of their own. A new package must be given a layer.
var layers = map[string]int{
	"pkg/clock":       -1, // the wall clock, which every part may default to
	"pkg/descriptors": 0, "pkg/quota": 0, "lua": 0, "internal/observe/flap": 0,
	"internal/observe/statsmap": 0, "internal/observe/logging": 0,
	"internal/edge/certs": 0, "internal/supervise": 0, "internal/edge/connlimit": 0, "internal/source/reload": 0,
	"pkg/limiter": 1, "pkg/rules": 1, "internal/observe/statsd": 1, "internal/source/xds": 1, "internal/edge/httpserver": 1,
	"pkg/limiter/limitertest": 2, "pkg/store": 2, "internal/guard/breaker": 2, "internal/guard/overlimit": 2, "internal/observe/metrics": 2,
	"internal/observe/top": 2,
	"pkg/rlqs/demand":      3, "internal/observe/tracing": 3, "internal/observe/refstats": 3,
	"pkg/rls": 4, "pkg/rlqs": 4,
	"internal/settings": 5,
	"internal/admin":    6,
	"internal/server":   7, "internal/opsctl": 7,
	"cmd/server": 8,

	"internal/testing/child": testSupport, "internal/testing/clock": testSupport, "internal/testing/dashboard": testSupport,
	"internal/testing/envoysim": testSupport, "internal/testing/faultproxy": testSupport, "internal/testing/files": testSupport,
	"internal/testing/loopback": testSupport, "internal/testing/procstat": testSupport, "internal/testing/rawh2": testSupport,
	"internal/testing/scrape": testSupport, "internal/testing/wait": testSupport, "internal/testing/xdstest": testSupport,
	"internal/testing/certtest": testSupport + 1, "internal/testing/redistest": testSupport + 1,
	"internal/testing/envoytest": testSupport + 2, "internal/testing/refserver": testSupport + 2,

	"bench/load": benchTools, "bench/benchproc": benchTools,
	"bench/callgrind": benchTools + 1, "bench/envoy": benchTools + 1, "bench/loadgen": benchTools + 1,
	"bench/nullrls": benchTools + 1, "bench/rls": benchTools + 1, "bench/rlqs": benchTools + 1,

	"e2e": tests, "examples": tests, "internal/layout": tests,
}

// The first layer of each part after the product's.
const (
	testSupport = 9
	benchTools  = 12
	tests       = 14
)

// owners says which packages of the product may import a dependency:
// Envoy's service protos stay in the adapters, its rules protos in the
// rules loader and the xDS client, go-redis in the store. Test support and
// benchmarks are the product's clients and harness: they use what they
// need.
var owners = []struct {
	prefix string
	may    []string
}{
	{"github.com/envoyproxy/go-control-plane/envoy/service/", []string{"pkg/rls", "pkg/rlqs"}},
	{"github.com/envoyproxy/go-control-plane/envoy/extensions/", []string{"pkg/rls", "pkg/rlqs"}},
	{"github.com/envoyproxy/go-control-plane/ratelimit/", []string{"pkg/rules"}},
	{"github.com/envoyproxy/go-control-plane/pkg/", []string{"pkg/rules", "internal/source/xds"}},
	{"github.com/redis/go-redis/", []string{"pkg/store", "pkg/rlqs/demand", "internal/observe/logging"}},
	{"github.com/redis/rueidis", []string{"pkg/store"}},
}

// TestImportsOneWay fails when a package imports one of its own layer or
// above, or a dependency that another package owns; and when the tests
// of a package below the benchmarks import a benchmark or a test package.
func TestImportsOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-f",
		"{{.ImportPath}} {{join .Imports \" \"}} | {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		code, tests, _ := strings.Cut(line, " | ")
		fields := strings.Fields(code)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok {
			continue
		}
		layer, ok := layers[pkg]
		if !ok {
			t.Errorf("%s has no layer: add it to layers", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if dep, ours := strings.CutPrefix(imp, module); ours {
				if strings.HasPrefix(pkg, "pkg/") && strings.HasPrefix(dep, "internal/") {
					t.Errorf("%s imports %s: pkg/ is what embedders import and never imports internal/", pkg, dep)
				}
				if l, known := layers[dep]; known && l >= layer {
					t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down", pkg, layer, dep, l)
				}
				continue
			}
			for _, o := range owners {
				if layer < testSupport && strings.HasPrefix(imp, o.prefix) && !contains(o.may, pkg) {
					t.Errorf("%s imports %s, which only %v may", pkg, imp, o.may)
				}
			}
		}
		for _, imp := range strings.Fields(tests) {
			dep, _ := strings.CutPrefix(imp, module)
			if l, known := layers[dep]; known && l >= benchTools && layer < benchTools {
				t.Errorf("the tests of %s import %s: tests may import test support, not the benchmarks or other tests", pkg, dep)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
