package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/scrape"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// opsRules are the rules TestReloadStatus breaks and mends.
const opsRules = "domain: ops\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"

// TestStoreFailureWarns: failures of one cause write one warn line a
// second with their reason, the next naming how many were left out.
func TestStoreFailureWarns(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	f := newFailureLog(zap.New(core), "error")
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	full := fmt.Errorf("memory take: %w: %w", limiter.ErrUnavailable, store.ErrFull)
	for range 5 {
		f.Failed("d", full, 0)
		f.Failed("d", context.DeadlineExceeded, 0)
		f.Failed("d", fmt.Errorf("x: %w", limiter.ErrInvalid), 0)
		f.Failed("d", limiter.ErrNoRules, 0)
	}
	now = now.Add(1100 * time.Millisecond)
	f.Failed("d", full, 0)
	lines := logs.All()
	if len(lines) != 3 {
		t.Fatalf("%d lines: %v", len(lines), lines)
	}
	for i, want := range []struct {
		cause      string
		suppressed int64
	}{{"memory store full", 0}, {"store timeout", 0}, {"memory store full", 4}} {
		fs := lines[i].ContextMap()
		if fs["cause"] != want.cause || fs["suppressed"] != want.suppressed || !strings.Contains(fmt.Sprint(fs["error"]), map[bool]string{true: "full", false: "deadline"}[i != 1]) {
			t.Errorf("line %d: %v", i, fs)
		}
	}
	if !errors.Is(full, store.ErrFull) {
		t.Fatal("test error is not ErrFull")
	}
}

// TestReloadStatus: after a failed reload /v1/rules names the error and
// when; a good reload after it logs that good rules are back.
func TestReloadStatus(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	dir := files.Dir(t, map[string]string{"ops.yaml": opsRules})
	s := testServerOn(t, dir, zap.New(core))
	path := filepath.Join(dir, "ops.yaml")
	files.Write(t, path, "domain: ops\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	s.rules.reload(context.Background(), "test")
	_, body := scrape.Get(t, "http://"+s.AdminAddr()+"/v1/rules")
	if !strings.Contains(body, "# last failed reload at ") || !strings.Contains(body, "an earlier load, are in force") || !strings.Contains(body, path+":4:") {
		t.Errorf("/v1/rules after a failed reload:\n%s", body)
	}
	files.Write(t, path, opsRules)
	s.rules.reload(context.Background(), "test")
	if n := logs.FilterMessage("rules reloaded after a failed reload: the rules in force are good and unchanged").Len(); n != 1 {
		t.Errorf("%d recovery lines", n)
	}
	_, body = scrape.Get(t, "http://"+s.AdminAddr()+"/v1/rules")
	if !strings.Contains(body, "(rules loaded since, last at ") {
		t.Errorf("/v1/rules after recovering:\n%s", body)
	}
}
