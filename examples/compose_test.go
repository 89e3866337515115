package examples_test

import (
	"regexp"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// pinnedTag is an image tag naming one release: x.y.z, with an optional
// v before and a variant after (7.4.2-alpine).
var pinnedTag = regexp.MustCompile(`^[^:@]+:v?\d+\.\d+\.\d+(-[a-z0-9.]+)?$`)

// TestComposeImagesPinned: both compose files run the Envoy the tests run
// (envoytest.Version, docs/envoy.md) and pin every image they pull to one
// release; the images they build from the repository are exempt.
func TestComposeImagesPinned(t *testing.T) {
	for _, path := range []string{composeFile, rlqsCompose} {
		var cf struct {
			Services map[string]struct {
				Image string `yaml:"image"`
				Build any    `yaml:"build"`
			} `yaml:"services"`
		}
		if err := yaml.Unmarshal(files.Read(t, path), &cf); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		envoy, ok := cf.Services["envoy"]
		if want := "envoyproxy/envoy:v" + envoytest.Version; !ok || envoy.Image != want {
			t.Errorf("%s: envoy runs %q, want %q, the Envoy the tests run", path, envoy.Image, want)
		}
		for name, s := range cf.Services {
			if s.Build != nil {
				continue
			}
			if !pinnedTag.MatchString(s.Image) {
				t.Errorf("%s: service %s pulls %q, not pinned to one release", path, name, s.Image)
			}
		}
	}
}
