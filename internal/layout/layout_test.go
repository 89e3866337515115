package layout_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/fastlimit/fastlimit/"

// layers ranks the project's packages: a package may import only
// packages of lower layers. Packages not listed (internal/testing, bench
// tools, e2e, examples) are exempt; a new package must be given a
// layer.
var layers = map[string]int{
	"pkg/descriptors": 0, "pkg/quota": 0, "lua": 0, "internal/observe/flap": 0,
	"internal/observe/statsmap": 0, "internal/observe/logging": 0,
	"internal/edge/certs": 0, "internal/edge/connlimit": 0, "internal/source/reload": 0,
	"pkg/limiter": 1, "pkg/rules": 1, "internal/observe/statsd": 1, "internal/source/xds": 1, "internal/edge/httpserver": 1,
	"pkg/limiter/limitertest": 2, "pkg/store": 2, "internal/guard/breaker": 2, "internal/guard/overlimit": 2, "internal/observe/metrics": 2,
	"internal/observe/top": 2,
	"pkg/rlqs/demand":      3, "internal/observe/tracing": 3, "internal/observe/refstats": 3,
	"pkg/rls": 4, "pkg/rlqs": 4,
	"internal/settings": 5,
	"internal/admin":    6,
	"internal/server":   7, "internal/opsctl": 7,
	"cmd/server": 8,
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
	{"github.com/envoyproxy/go-control-plane/pkg/", []string{"pkg/rules", "internal/source/xds"}},
	{"github.com/redis/go-redis/", []string{"pkg/store", "pkg/rlqs/demand", "internal/observe/logging"}},
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
				if strings.HasPrefix(pkg, "pkg/") && strings.HasPrefix(dep, "internal/") {
					t.Errorf("%s imports %s: pkg/ is what embedders import and never imports internal/", pkg, dep)
				}
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
	return strings.HasPrefix(pkg, "internal/testing/") || strings.HasPrefix(pkg, "bench/") ||
		pkg == "internal/layout" || pkg == "e2e" || pkg == "examples"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
