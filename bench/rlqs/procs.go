package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fastlimit/fastlimit/bench/benchproc"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// env is the processes a run measures: one redis-server and one FastLimit
// on it, both on free loopback ports.
type env struct {
	dir       string
	redis     *exec.Cmd
	redisAddr string
	server    *exec.Cmd
	grpcAddr  string
	httpAddr  string
	adminAddr string
	log       io.Writer
	ports     benchproc.Ports
	bin       string // the server binary, and its rules
	rules     string
	serverEnv []string // the server's environment beyond benchproc.ChildEnv's
}

// rules: domain bench has 1,000 limits (name=0 ... name=999) for the
// report scenarios; domain adm 10 limits of 2,000/s (name=adm0 ...).
func rulesYAML() string {
	var b strings.Builder
	b.WriteString("domain: bench\ndescriptors:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  - key: name\n    value: \"%d\"\n    rate_limit: {unit: second, requests_per_unit: 1000}\n", i)
	}
	return b.String()
}

const admRules = `domain: adm
descriptors:
  - key: name
    value: "adm*"
    rate_limit: {unit: second, requests_per_unit: 2000}
  # {name: flood, tenant: <any>}: a limit per tenant, for the flood scenario.
  - key: name
    value: flood
    descriptors:
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 10}
`

// setup builds ./cmd/server, or takes the binary bin if given, and
// starts Redis and the server.
func setup(ctx context.Context, log io.Writer, bin string) (*env, error) {
	dir, err := os.MkdirTemp("", "rlqsbench")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir, log: log}
	if bin == "" {
		bin = filepath.Join(dir, "fastlimit")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/fastlimit/fastlimit/cmd/server")
		build.Stdout, build.Stderr = log, log
		if err := build.Run(); err != nil {
			e.close()
			return nil, fmt.Errorf("build ./cmd/server (run from the repository root): %w", err)
		}
	}
	rules := filepath.Join(dir, "rules")
	if err := os.MkdirAll(rules, 0o755); err != nil {
		e.close()
		return nil, err
	}
	for name, body := range map[string]string{"bench.yaml": rulesYAML(), "adm.yaml": admRules} {
		if err := os.WriteFile(filepath.Join(rules, name), []byte(body), 0o644); err != nil {
			e.close()
			return nil, err
		}
	}
	if err := e.startRedis(ctx); err != nil {
		e.close()
		return nil, err
	}
	e.bin, e.rules = bin, rules
	if err := e.startServer(ctx); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// restart stops the server and starts it again with extra flags, on new
// ports; the caller dials it again.
func (e *env) restart(ctx context.Context, extra ...string) error {
	killProc(e.server)
	return e.startServer(ctx, extra...)
}

// freeAddr returns a loopback address whose port no other process of the
// run was given.
func (e *env) freeAddr() (string, error) {
	port, err := e.ports.Free()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

func (e *env) startRedis(ctx context.Context) error {
	addr, err := e.freeAddr()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	e.redisAddr = addr
	e.redis = exec.CommandContext(ctx, "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	e.redis.Stdout, e.redis.Stderr, e.redis.Env = e.log, e.log, benchproc.ChildEnv()
	if err := e.redis.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	return wait.Until(ctx, 5*time.Second, func() error {
		_, err := redisCmd(e.redisAddr, "PING")
		return err
	})
}

func (e *env) startServer(ctx context.Context, extra ...string) error {
	p, err := e.launch(ctx, extra...)
	if p != nil {
		e.server, e.grpcAddr, e.httpAddr, e.adminAddr = p.cmd, p.grpcAddr, p.httpAddr, p.adminAddr
	}
	return err
}

// serverProc is a server process and its addresses.
type serverProc struct {
	cmd                           *exec.Cmd
	grpcAddr, httpAddr, adminAddr string
}

// launch starts a server of e's binary, rules and Redis on new ports with
// extra flags, and waits for its /healthcheck; the process is returned
// with an error once it started (to be stopped).
func (e *env) launch(ctx context.Context, extra ...string) (*serverProc, error) {
	var p serverProc
	for _, a := range []*string{&p.grpcAddr, &p.httpAddr, &p.adminAddr} {
		var err error
		if *a, err = e.freeAddr(); err != nil {
			return nil, err
		}
	}
	args := append([]string{"--config", e.rules, "--grpc-addr", p.grpcAddr, "--http-addr", p.httpAddr,
		"--admin-addr", p.adminAddr, "--redis-url", "redis://" + e.redisAddr, "--log-level", "warn", "--drain", "0s",
		"--rlqs", "--rlqs-replica", "bench",
		// The isolation scenario opens more streams than --rlqs-max-streams'
		// default: the bound is not what it measures.
		"--rlqs-max-streams", "0"}, extra...)
	p.cmd = exec.CommandContext(ctx, e.bin, args...)
	// Apart from the caller's environment: the server reads a variable
	// for every flag it is not given.
	p.cmd.Stdout, p.cmd.Stderr, p.cmd.Env = e.log, e.log, benchproc.ChildEnv(e.serverEnv...)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	return &p, wait.Until(ctx, 15*time.Second, func() error {
		resp, err := http.Get("http://" + p.httpAddr + "/healthcheck")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthcheck: %d", resp.StatusCode)
		}
		return nil
	})
}

// killProc stops a process started, and waits for it: SIGTERM, so that a
// server with --rlqs-process stops its child before it exits, then
// SIGKILL if it has not exited within 30 s.
func killProc(c *exec.Cmd) {
	if c == nil || c.Process == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_ = c.Wait()
		close(done)
	}()
	_ = c.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

func (e *env) close() {
	killProc(e.server)
	killProc(e.redis)
	_ = os.RemoveAll(e.dir)
}

// cpu is the CPU time used so far by the server and by Redis.
type cpu struct{ server, redis time.Duration }

func (e *env) cpu() (cpu, error) {
	s, err := benchproc.ProcCPU(e.server.Process.Pid)
	if err != nil {
		return cpu{}, err
	}
	info, err := redisCmd(e.redisAddr, "INFO", "cpu", "stats")
	if err != nil {
		return cpu{}, err
	}
	r, err := benchproc.ParseInfo(info)
	if err != nil {
		return cpu{}, err
	}
	return cpu{server: s, redis: r.CPU}, nil
}

func (c cpu) sub(o cpu) cpu { return cpu{server: c.server - o.server, redis: c.redis - o.redis} }

// redisCmd sends one inline command and returns its reply's text.
func redisCmd(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(strings.Join(args, " ") + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	switch line[0] {
	case '+':
		return strings.TrimSpace(line[1:]), nil
	case '$':
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		buf := make([]byte, n+2)
		_, err := io.ReadFull(r, buf)
		return string(buf[:n]), err
	}
	return "", fmt.Errorf("redis: %s", strings.TrimSpace(line))
}

// storeErrors reads fastlimit_rlqs_store_errors_total from the server's
// metrics.
func (e *env) storeErrors() (float64, error) { return e.metric("fastlimit_rlqs_store_errors_total") }

// metric sums the series of a metric (every label set) from the server's
// metrics.
func (e *env) metric(name string) (float64, error) {
	return metricAt(e.adminAddr, name)
}

// metricAt is the sum of a metric's samples on the server whose admin
// listener is at admin.
func metricAt(admin, name string) (float64, error) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || rest[0] != ' ' && rest[0] != '{' {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[strings.LastIndexByte(rest, ' ')+1:]), 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// flush empties Redis between scenarios.
func (e *env) flush() error {
	_, err := redisCmd(e.redisAddr, "FLUSHALL")
	return err
}

func machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs (server, Redis and the load share them)", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
}
