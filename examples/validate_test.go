package examples_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
)

// TestBootstrapsValidate runs `envoy --mode validate` of Envoy itself on
// every Envoy bootstrap the repository ships: each tracked YAML file whose
// top level has static_resources.
func TestBootstrapsValidate(t *testing.T) {
	envoytest.Bin(t)
	files := shippedBootstraps(t)
	if len(files) < 2 {
		t.Fatalf("found %d bootstraps (%v): the examples' envoy.yaml files should be among them", len(files), files)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			out, err := envoytest.Validate(t, filepath.Join("..", f))
			if err != nil {
				t.Fatalf("envoy --mode validate %s: %v\n%s", f, err, out)
			}
		})
	}
}

// shippedBootstraps lists the tracked YAML files, relative to the
// repository's root, that are Envoy bootstraps.
func shippedBootstraps(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--", "*.yaml", "*.yml")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Fields(string(out)) {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		var top map[string]any
		if yaml.Unmarshal(b, &top) != nil {
			continue // multi-document manifests: not bootstraps
		}
		if _, ok := top["static_resources"]; ok {
			files = append(files, f)
		}
	}
	return files
}
