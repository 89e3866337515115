package e2e_test

import (
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// chromiumFlags start headless Chromium as root on a machine without a
// network beyond loopback (docs/development.md).
var chromiumFlags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync"}

// chromium returns Debian's Chromium; without it the test fails under
// FASTLIMIT_REQUIRE_REDIS=1 (scripts/test.sh installs it) and is skipped
// otherwise.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("FASTLIMIT_REQUIRE_REDIS") == "1" {
		t.Fatal("chromium is missing: scripts/test.sh installs Debian's package (apt-get install chromium)")
	}
	t.Skip("chromium is missing (apt-get install chromium); FASTLIMIT_REQUIRE_REDIS=1 makes this a failure")
	return ""
}

// browse runs Chromium on url with args, in a fresh profile, and returns
// what it printed on standard output.
func browse(t *testing.T, bin, url string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	argv := append(append(append([]string{}, chromiumFlags...), "--user-data-dir="+t.TempDir()), args...)
	cmd := exec.CommandContext(ctx, bin, append(argv, url)...)
	cmd.SysProcAttr = child.Attr()
	var stdout, stderr child.Output
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%w; stderr:\n%s", err, stderr.String())
	}
	return stdout.String(), err
}

// TestAdminPageInBrowser: a customer limited by the real binary appears
// on the admin page in headless Chromium, whose script has refreshed the
// page from the JSON endpoints; a screenshot of it is saved in the
// test's directory, or in FASTLIMIT_E2E_ARTIFACTS when set (made if
// missing; scripts/test.sh sets .tmp/e2e-artifacts), which keeps it.
func TestAdminPageInBrowser(t *testing.T) {
	bin := chromium(t)
	dir := files.Dir(t, map[string]string{"ops.yaml": opsRules})
	srv, admin := startOps(t, dir)
	ctx := ctxTimeout(t, 30*time.Second)
	who := fmt.Sprint("page-customer-", time.Now().UnixNano())
	for range 8 { // 5 allowed, then over the limit
		if _, err := srv.Client.ShouldRateLimit(ctx, requestIn("ops", desc("customer", who))); err != nil {
			t.Fatal(err)
		}
	}
	if resp, err := srv.Client.ShouldRateLimit(ctx, requestIn("ops", desc("customer", who))); err != nil ||
		resp.GetOverallCode().String() != "OVER_LIMIT" {
		t.Fatalf("the customer is not limited: %v, %v", resp, err)
	}
	url := "http://" + admin + "/"
	var dom string
	if !wait.True(3*time.Minute, func() bool {
		out, err := browse(t, bin, url, "--virtual-time-budget=5000", "--dump-dom")
		if err != nil {
			t.Log(err)
			return false
		}
		dom = out
		return strings.Contains(dom, who) && strings.Contains(dom, `data-refreshed="`)
	}) {
		t.Fatalf("the page never showed %s after a refresh; last DOM:\n%s", who, dom)
	}
	for _, want := range []string{"Top limited identifiers", "ops.customer", filepath.Join(dir, "ops.yaml") + ":3", `id="store">memory<`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	out := os.Getenv("FASTLIMIT_E2E_ARTIFACTS")
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatalf("FASTLIMIT_E2E_ARTIFACTS: %v", err)
	}
	shot := filepath.Join(out, "admin-page.png")
	if _, err := browse(t, bin, url, "--virtual-time-budget=5000", "--window-size=1280,900", "--screenshot="+shot); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	// A page, not a blank: several colours in the top half, where the
	// headings and the limited customer are.
	colours := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Min.Y+b.Dy()/2; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[r>>12<<8|g>>12<<4|bl>>12] = true
		}
	}
	if b.Dx() != 1280 || len(colours) < 4 {
		t.Errorf("screenshot %s: %dx%d with %d colours: not the page", shot, b.Dx(), b.Dy(), len(colours))
	}
	t.Logf("screenshot of the admin page: %s", shot)
}
