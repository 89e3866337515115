package main

import (
	"bufio"
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
	"runtime"
	"strconv"
	"strings"
	"time"
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
`

func setup(ctx context.Context, log io.Writer) (*env, error) {
	dir, err := os.MkdirTemp("", "rlqsbench")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir, log: log}
	bin := filepath.Join(dir, "fastlimit")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/server")
	build.Stdout, build.Stderr = log, log
	if err := build.Run(); err != nil {
		e.close()
		return nil, fmt.Errorf("build ./cmd/server (run from the repository root): %w", err)
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
	if err := e.startServer(ctx, bin, rules); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (e *env) startRedis(ctx context.Context) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	e.redisAddr = addr
	e.redis = exec.CommandContext(ctx, "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	e.redis.Stdout, e.redis.Stderr = e.log, e.log
	if err := e.redis.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	return waitFor(5*time.Second, func() bool {
		_, err := redisCmd(e.redisAddr, "PING")
		return err == nil
	})
}

func (e *env) startServer(ctx context.Context, bin, rules string) error {
	var err error
	if e.grpcAddr, err = freeAddr(); err != nil {
		return err
	}
	if e.httpAddr, err = freeAddr(); err != nil {
		return err
	}
	if e.adminAddr, err = freeAddr(); err != nil {
		return err
	}
	e.server = exec.CommandContext(ctx, bin, "--config", rules, "--grpc-addr", e.grpcAddr, "--http-addr", e.httpAddr,
		"--admin-addr", e.adminAddr, "--redis-url", "redis://"+e.redisAddr, "--log-level", "warn", "--drain", "0s",
		"--rlqs-replica", "bench")
	e.server.Stdout, e.server.Stderr = e.log, e.log
	if err := e.server.Start(); err != nil {
		return err
	}
	return waitFor(15*time.Second, func() bool {
		resp, err := http.Get("http://" + e.httpAddr + "/healthcheck")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (e *env) close() {
	for _, c := range []*exec.Cmd{e.server, e.redis} {
		if c != nil && c.Process != nil {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	_ = os.RemoveAll(e.dir)
}

func waitFor(d time.Duration, cond func() bool) error {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return nil
		}
	}
	return errors.New("not ready in time")
}

// cpu is the CPU time used so far by the server and by Redis.
type cpu struct{ server, redis time.Duration }

func (e *env) cpu() (cpu, error) {
	s, err := procCPU(e.server.Process.Pid)
	if err != nil {
		return cpu{}, err
	}
	info, err := redisCmd(e.redisAddr, "INFO", "cpu")
	if err != nil {
		return cpu{}, err
	}
	var r float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			r += f
		}
	}
	return cpu{server: s, redis: time.Duration(r * float64(time.Second))}, nil
}

func (c cpu) sub(o cpu) cpu { return cpu{server: c.server - o.server, redis: c.redis - o.redis} }

// procCPU is utime + stime of a process from /proc (100 ticks a second,
// Linux' USER_HZ).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("the server's CPU time needs Linux' /proc: %w", err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("cannot parse /proc/%d/stat", pid)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}

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
func (e *env) storeErrors() (float64, error) {
	resp, err := http.Get("http://" + e.adminAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "fastlimit_rlqs_store_errors_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// flush empties Redis between scenarios.
func (e *env) flush() error {
	_, err := redisCmd(e.redisAddr, "FLUSHALL")
	return err
}

func machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs (server, Redis and the load share them)", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
}
