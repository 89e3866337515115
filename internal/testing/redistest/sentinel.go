package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// MasterName is the name the sentinels of a Sentinel monitor.
const MasterName = "mymaster"

// Sentinel is a master with two replicas watched by three sentinels
// (quorum 2, down after 1 s, failover timeout 3 s), on free loopback
// ports, without persistence. StartSentinel makes one per test; it stops
// when the test ends, and on Linux it also dies with the test binary.
type Sentinel struct {
	nodes     []*proc // the first master, then the replicas
	sentinels []*proc
	dir       string
	stop      sync.Once
}

// StartSentinel starts the master and its replicas, waits until the
// replicas are in sync, then starts the sentinels and waits until each
// one knows both replicas and the other sentinels (a few seconds). It
// skips t when redis-server is missing, or fails it with
// FASTLIMIT_REQUIRE_REDIS=1.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	server := lookPath(t, "redis-server")
	s := &Sentinel{}
	s.dir = setupDir(t, "sentinel", s.Logs, s.Stop)
	dir := s.dir
	start := time.Now()
	master, err := startProc("master", server, dir, func(port int, dir string) ([]string, error) {
		return nodeArgs(port, dir), nil
	})
	if err != nil {
		t.Fatalf("start master: %v", err)
	}
	s.nodes = append(s.nodes, master)
	replicaArgs := func(port int, dir string) ([]string, error) {
		_, mport, _ := net.SplitHostPort(master.addr)
		return append(nodeArgs(port, dir), "--replicaof", "127.0.0.1", mport), nil
	}
	for i := range 2 {
		r, err := startProc(fmt.Sprintf("replica %d", i+1), server, dir, replicaArgs)
		if err != nil {
			t.Fatalf("start replica: %v", err)
		}
		s.nodes = append(s.nodes, r)
	}
	if err := wait.Until(context.Background(), waitTimeout, s.replicasInSync); err != nil {
		t.Fatalf("replicas not in sync: %v\n%s", err, s.Logs())
	}
	for i := range 3 {
		p, err := startProc(fmt.Sprintf("sentinel %d", i+1), server, dir, func(port int, dir string) ([]string, error) {
			return sentinelArgs(port, dir, master.addr)
		})
		if err != nil {
			t.Fatalf("start sentinel: %v", err)
		}
		s.sentinels = append(s.sentinels, p)
	}
	if err := wait.Until(context.Background(), waitTimeout, s.sentinelsReady); err != nil {
		t.Fatalf("sentinels not ready: %v\n%s", err, s.Logs())
	}
	t.Logf("redis sentinel setup ready in %v: %s", time.Since(start).Round(time.Millisecond), s.URL())
	return s
}

// sentinelArgs writes a sentinel's configuration file (a sentinel
// rewrites it, so it must be its own) and returns its arguments.
func sentinelArgs(port int, dir, master string) ([]string, error) {
	host, mport, _ := net.SplitHostPort(master)
	conf := strings.Join([]string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"daemonize no",
		`logfile ""`,
		"dir " + dir,
		fmt.Sprintf("sentinel monitor %s %s %s 2", MasterName, host, mport),
		"sentinel down-after-milliseconds " + MasterName + " 1000",
		"sentinel failover-timeout " + MasterName + " 3000",
		"sentinel parallel-syncs " + MasterName + " 1",
		"",
	}, "\n")
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return []string{path, "--sentinel"}, nil
}

func (s *Sentinel) replicasInSync() error {
	for _, n := range s.nodes[1:] {
		repl, err := doString(n.addr, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("%s: %w", n.addr, err)
		}
		if st := infoField(repl, "master_link_status"); st != "up" || infoField(repl, "master_sync_in_progress") != "0" {
			return fmt.Errorf("%s: link %q", n.addr, st)
		}
	}
	return nil
}

func (s *Sentinel) sentinelsReady() error {
	for _, p := range s.sentinels {
		info, err := doString(p.addr, "INFO", "sentinel")
		if err != nil {
			return fmt.Errorf("%s: %w", p.addr, err)
		}
		// master0:name=mymaster,status=ok,address=…,slaves=2,sentinels=3
		line := infoField(info, "master0")
		for _, want := range []string{"status=ok", "slaves=2", "sentinels=3"} {
			if !strings.Contains(line, want) {
				return fmt.Errorf("%s: %q lacks %s", p.addr, line, want)
			}
		}
	}
	return nil
}

// URL returns "mymaster,host:port,…" (the sentinels), as --redis-url takes
// it with --redis-type sentinel.
func (s *Sentinel) URL() string {
	parts := []string{MasterName}
	for _, p := range s.sentinels {
		parts = append(parts, p.addr)
	}
	return strings.Join(parts, ",")
}

// Master returns the master's address as a majority of the live sentinels
// report it.
func (s *Sentinel) Master(t testing.TB) string {
	t.Helper()
	addr, err := s.master()
	if err != nil {
		t.Fatalf("sentinel master: %v", err)
	}
	return addr
}

func (s *Sentinel) master() (string, error) {
	votes := map[string]int{}
	var errs []error
	for _, p := range s.sentinels {
		if !p.Alive() {
			continue
		}
		v, err := do(p.addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		hp, _ := v.([]any)
		if len(hp) != 2 {
			errs = append(errs, fmt.Errorf("%s answered %v", p.addr, v))
			continue
		}
		host, _ := hp[0].(string)
		port, _ := hp[1].(string)
		votes[net.JoinHostPort(host, port)]++
	}
	for addr, n := range votes {
		if n >= 2 {
			return addr, nil
		}
	}
	return "", fmt.Errorf("no majority: %v %w", votes, errors.Join(errs...))
}

// Kill ends the node at addr with SIGKILL, as a crash would.
func (s *Sentinel) Kill(t testing.TB, addr string) {
	t.Helper()
	for _, n := range s.nodes {
		if n.addr == addr {
			n.Kill()
			return
		}
	}
	t.Fatalf("no redis node at %s", addr)
}

// WaitFailover waits until the sentinels name a master other than old and
// that node answers as a master, and returns its address.
func (s *Sentinel) WaitFailover(t testing.TB, old string) string {
	t.Helper()
	var addr string
	err := wait.Until(context.Background(), waitTimeout, func() error {
		a, err := s.master()
		if err != nil {
			return err
		}
		if a == old {
			return fmt.Errorf("sentinels still name %s", old)
		}
		repl, err := doString(a, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		if r := infoField(repl, "role"); r != "master" {
			return fmt.Errorf("%s is still a %s", a, r)
		}
		addr = a
		return nil
	})
	if err != nil {
		t.Fatalf("sentinel failover from %s: %v\n%s", old, err, s.Logs())
	}
	return addr
}

// Logs returns the last lines of every process' output.
func (s *Sentinel) Logs() string {
	return logs(append(append([]*proc{}, s.nodes...), s.sentinels...), 40)
}

// Stop kills every process and removes their directories. It is
// idempotent; StartSentinel arranges for it to run when the test ends.
func (s *Sentinel) Stop() {
	s.stop.Do(func() {
		for _, p := range append(append([]*proc{}, s.sentinels...), s.nodes...) {
			p.Kill()
		}
		_ = os.RemoveAll(s.dir)
	})
}
