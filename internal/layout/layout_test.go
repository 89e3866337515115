package layout_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/fastlimit/fastlimit/"

// layers ranks the project's packages: a package may import only
// packages of lower layers. Packages not listed (internal test support,
// bench tools, e2e, examples) are exempt; a new package must be given a
// layer.
var layers = map[string]int{
	"pkg/descriptors": 0, "pkg/quota": 0, "lua": 0, "pkg/statsd": 0, "pkg/statsmap": 0, "pkg/certs": 0, "pkg/reload": 0, "pkg/connlimit": 0,
	"pkg/logging": 0,
	"pkg/limiter": 1, "pkg/rules": 1, "pkg/xds": 1, "pkg/httpserver": 1,
	"pkg/limiter/limitertest": 2, "pkg/store": 2, "pkg/breaker": 2, "pkg/overlimit": 2,
	"pkg/tracing": 3, "pkg/metrics": 3, "pkg/refstats": 3,
	"pkg/rls": 4, "pkg/rlqs": 4,
	"pkg/settings": 5,
	"pkg/server":   6,
	"cmd/server":   7, "cmd/bench": 7, "cmd/loadgen": 7,
}

// owners says which packages may import a dependency: Envoy's service
// protos stay in the adapters, its rules protos in the rules loader and
// the xDS client, go-redis in the store.
var owners = []struct {
	prefix string
	may    []string
}{
	{"github.com/envoyproxy/go-control-plane/envoy/service/", []string{"pkg/rls", "pkg/rlqs"}},
	{"github.com/envoyproxy/go-control-plane/envoy/extensions/", []string{"pkg/rls", "pkg/rlqs"}},
	{"github.com/envoyproxy/go-control-plane/ratelimit/", []string{"pkg/rules"}},
	{"github.com/envoyproxy/go-control-plane/pkg/", []string{"pkg/rules", "pkg/xds"}},
	{"github.com/redis/go-redis/", []string{"pkg/store"}},
	{"github.com/redis/rueidis", []string{"pkg/store"}},
}

// TestImportsOneWay fails when a package imports one of its own layer or
// above, or a dependency that another package owns.
func TestImportsOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok || exempt(pkg) {
			continue
		}
		layer, ok := layers[pkg]
		if !ok {
			t.Errorf("%s has no layer: add it to layers", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if dep, ours := strings.CutPrefix(imp, module); ours {
				if l, known := layers[dep]; known && l >= layer {
					t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down", pkg, layer, dep, l)
				}
				continue
			}
			for _, o := range owners {
				if strings.HasPrefix(imp, o.prefix) && !contains(o.may, pkg) {
					t.Errorf("%s imports %s, which only %v may", pkg, imp, o.may)
				}
			}
		}
	}
}

func exempt(pkg string) bool {
	return strings.HasPrefix(pkg, "internal/") || strings.HasPrefix(pkg, "bench/") || pkg == "e2e" || pkg == "examples"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
