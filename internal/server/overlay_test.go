package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
	"github.com/fastlimit/fastlimit/internal/testing/xdstest"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// overlayOf makes the limit of key k in domain x a token bucket of burst.
func overlayOf(burst string) string {
	return "domains:\n  - domain: x\n    descriptors:\n      - key: k\n        rate_limit: {algorithm: token_bucket, burst: " + burst + "}\n"
}

// limitOf is the limit of k=v in domain x in force.
func limitOf(s *Server) *descriptors.Limit {
	set := s.limiter.Rules()
	if set == nil {
		return nil
	}
	return descriptors.Match(set.Domain("x"), []descriptors.Entry{{Key: "k", Value: "v"}})
}

// TestXDSOverlay: --rules-overlay extends every snapshot; a change of the
// file recompiles the last snapshot with it; a bad one is refused while
// the rules in force stay; entries that extend nothing are counted.
func TestXDSOverlay(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(t, xdsNode, "v1", xdstest.Config("rl-x", "x", xdstest.Limit("k", "", rlsconf.RateLimitUnit_MINUTE, 2)))
	path := filepath.Join(t.TempDir(), "overlay.yaml")
	files.Write(t, path, overlayOf("20"))
	core, logs := zapobserver.New(zapcore.InfoLevel)
	s, opened := xdsServer(t, srv, zap.New(core), "--rules-overlay", path)
	waitOpen(t, opened)
	if l := limitOf(s); l == nil || l.Algorithm != descriptors.TokenBucket || l.Burst != 20*descriptors.Milli {
		t.Fatalf("limit %+v, want the overlay's token bucket of burst 20", l)
	}
	code, body := scrape.Get(t, "http://"+s.AdminAddr()+"/v1/rules")
	if code != http.StatusOK || !strings.Contains(body, "# rules overlay "+path+"\n") {
		t.Errorf("/v1/rules %d:\n%s", code, body)
	}

	// The file changes: the last snapshot again, with it.
	h1 := s.rules.Current().Hash
	files.Write(t, path, overlayOf("30"))
	waitHash(t, s, h1)
	if l := limitOf(s); l == nil || l.Burst != 30*descriptors.Milli {
		t.Fatalf("after the change: %+v, want burst 30", l)
	}
	if n := logs.FilterMessage("rules reloaded").FilterField(zap.String(logCause, causeOverlay)).Len(); n != 1 {
		t.Errorf("%d 'rules reloaded' lines with cause overlay", n)
	}

	// A bad overlay is refused: the rules in force stay.
	h2 := s.rules.Current().Hash
	files.Write(t, path, "domains:\n  - domain: x\n    descriptors:\n      - key: k\n        rate_limit: {unit: second}\n")
	wait.For(t, 10*time.Second, func() bool {
		return metricValue(t, s.registry, "fastlimit_config_loads_total", "result", "failure") == 1
	})
	if s.rules.Current().Hash != h2 || metricValue(t, s.registry, "fastlimit_config_last_reload_successful") != 0 {
		t.Error("a bad overlay changed the rules, or was not counted")
	}
	if n := logs.FilterMessage("rules reload failed; the rules in force stay").FilterField(zap.String(logCause, causeOverlay)).Len(); n != 1 {
		t.Errorf("%d failed reloads logged with cause overlay", n)
	}

	// An overlay whose entries extend nothing: warned and counted.
	files.Write(t, path, overlayOf("30")+"  - domain: gone\n")
	h3 := waitHash(t, s, h2)
	if got := metricValue(t, s.registry, "fastlimit_config_overlay_unmatched"); got != 1 {
		t.Errorf("fastlimit_config_overlay_unmatched = %v, want 1", got)
	}
	if n := logs.FilterMessage("rules loaded with warnings").Len(); n != 1 {
		t.Errorf("%d 'rules loaded with warnings' lines", n)
	}

	// A new snapshot takes the overlay in force.
	srv.Set(t, xdsNode, "v2", xdstest.Config("rl-x", "x", xdstest.Limit("k", "", rlsconf.RateLimitUnit_MINUTE, 5)))
	waitHash(t, s, h3)
	if l := limitOf(s); l == nil || l.RequestsPerUnit != 5 || l.Algorithm != descriptors.TokenBucket {
		t.Errorf("after v2: %+v, want v2's rate in the overlay's token bucket", l)
	}
}

// TestXDSOverlayBadAtStart: a bad overlay stops the start, naming the
// setting; rules files with an overlay are refused by Validate.
func TestXDSOverlayBadAtStart(t *testing.T) {
	srv := xdstest.Start(t, nil)
	path := filepath.Join(t.TempDir(), "overlay.yaml")
	files.Write(t, path, "domains: {}\n")
	_, opened := xdsServer(t, srv, zap.NewNop(), "--rules-overlay", path, "--xds-start-without-rules")
	select {
	case err := <-opened:
		if err == nil || !strings.Contains(err.Error(), "load the rules overlay (--rules-overlay): ") ||
			!strings.Contains(err.Error(), "domains: expected a list") {
			t.Errorf("Open = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open did not return")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, opened = xdsServer(t, srv, zap.NewNop(), "--rules-overlay", path, "--xds-start-without-rules")
	if err := <-opened; err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Open without the file = %v", err)
	}
}
