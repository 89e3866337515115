package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/bench/benchproc"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// startTimeout bounds the wait for a started process to serve: generous,
// for a loaded machine.
const startTimeout = 60 * time.Second

// procs starts the processes of a run and stops them all at the end, on
// error and on Ctrl-C; on Linux they also die with bench/envoy
// (parent-death signal).
type procs struct {
	dir   string // logs go here, one file per process
	ports benchproc.Ports
	mu    sync.Mutex
	list  []*proc
}

// proc is one child process; its output goes to a log file.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// start runs path with args and exactly env, its output in a log file.
func (ps *procs) start(name, path string, args, env []string) (*proc, error) {
	ps.mu.Lock()
	logPath := filepath.Join(ps.dir, fmt.Sprintf("%02d-%s.log", len(ps.list), strings.NewReplacer(" ", "-", "/", "-", "(", "", ")", "").Replace(name)))
	ps.mu.Unlock()
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, log: logPath, exited: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// The parent-death signal follows the thread that started the
	// process: that thread must live as long as the process.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := p.cmd.Start()
		started <- err
		if err == nil {
			_ = p.cmd.Wait()
		}
		_ = f.Close()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// stopAll stops every process: SIGTERM, then SIGKILL after 5 s.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range list {
		wg.Go(func() {
			if !p.alive() {
				return
			}
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(5 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		})
	}
	wg.Wait()
}

// addr returns a free loopback address for a child to listen on.
func (ps *procs) addr() (string, error) {
	port, err := ps.ports.Free()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// cpu returns the process' CPU time so far.
func (p *proc) cpu() (time.Duration, error) {
	if !p.alive() {
		return 0, p.failure(errors.New("exited during the run"))
	}
	return benchproc.ProcCPU(p.cmd.Process.Pid)
}

// failure describes p's failure with the end of its log.
func (p *proc) failure(err error) error {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return fmt.Errorf("%s: %w; the end of its log:\n%s", p.name, err, strings.Join(lines, "\n"))
}

// waitHTTP polls url until it answers 200, or p exits, or startTimeout.
func waitHTTP(ctx context.Context, p *proc, url string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	err := wait.Until(ctx, startTimeout, func() error {
		if !p.alive() {
			return errors.New("exited")
		}
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
	if err != nil {
		return p.failure(err)
	}
	return nil
}

// redisServer is a redis-server of one setup.
type redisServer struct {
	p    *proc
	addr string
	c    *redis.Client
}

// startRedis starts redis-server without persistence on a free port.
func startRedis(ctx context.Context, ps *procs, name string) (*redisServer, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	addr, err := ps.addr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	dir, err := os.MkdirTemp(ps.dir, "redis-")
	if err != nil {
		return nil, err
	}
	p, err := ps.start("redis-server for "+name, path, []string{"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--logfile", ""}, benchproc.ChildEnv())
	if err != nil {
		return nil, err
	}
	r := &redisServer{p: p, addr: addr, c: redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})}
	if err := wait.Until(ctx, startTimeout, func() error {
		if !p.alive() {
			return errors.New("exited")
		}
		return r.c.Ping(ctx).Err()
	}); err != nil {
		return nil, p.failure(err)
	}
	return r, nil
}

// cpu returns Redis' own CPU time so far, from INFO.
func (r *redisServer) cpu(ctx context.Context) (time.Duration, error) {
	info, err := r.c.Info(ctx, "cpu", "stats").Result()
	if err != nil {
		return 0, r.p.failure(err)
	}
	st, err := benchproc.ParseInfo(info)
	return st.CPU, err
}

// rulesFor writes the bench's rules for FastLimit (dir/fastlimit) and for
// the reference (dir/reference/ratelimit/config) and returns dir.
func writeRules(dir string) error {
	for _, d := range []string{filepath.Join(dir, "fastlimit"), filepath.Join(dir, "reference", "ratelimit", "config")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "bench.yaml"), []byte(benchRules), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// benchRules give each x-user a counter that no load reaches: every call
// is decided and counted, none refused.
const benchRules = `domain: bench
descriptors:
  - key: bench
    value: envoy
    descriptors:
      - key: user
        rate_limit:
          unit: second
          requests_per_unit: 1000000000
`

// buildFastLimit builds ./cmd/server of the module at root into dir.
func buildFastLimit(ctx context.Context, dir string) (string, error) {
	path := filepath.Join(dir, "fastlimit")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/server")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/server (run bench/envoy from the repository's root): %w\n%s", err, out)
	}
	return path, nil
}

// startFastLimit starts FastLimit on the bench's rules, on Redis when r is
// set, and returns its gRPC address.
func startFastLimit(ctx context.Context, ps *procs, bin, rulesDir, name string, r *redisServer) (*proc, string, error) {
	grpcAddr, err := ps.addr()
	if err != nil {
		return nil, "", err
	}
	httpAddr, err := ps.addr()
	if err != nil {
		return nil, "", err
	}
	args := []string{"--config", filepath.Join(rulesDir, "fastlimit"), "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--admin-addr", "off", "--log-level", "warn"}
	if r != nil {
		args = append(args, "--redis-url", "redis://"+r.addr+"/0")
	}
	p, err := ps.start(name, bin, args, benchproc.ChildEnv())
	if err != nil {
		return nil, "", err
	}
	return p, grpcAddr, waitHTTP(ctx, p, "http://"+httpAddr+"/healthcheck")
}

// startReference starts envoyproxy/ratelimit on the bench's rules and r,
// configured by its environment as its README says.
func startReference(ctx context.Context, ps *procs, bin, rulesDir string, r *redisServer) (*proc, string, error) {
	var ports [3]string
	for i := range ports {
		a, err := ps.addr()
		if err != nil {
			return nil, "", err
		}
		_, ports[i], _ = net.SplitHostPort(a)
	}
	env := benchproc.ChildEnv("USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=SINGLE",
		"REDIS_URL="+r.addr, "RUNTIME_ROOT="+filepath.Join(rulesDir, "reference"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false", "HOST=127.0.0.1", "PORT="+ports[0], "GRPC_HOST=127.0.0.1", "GRPC_PORT="+ports[1],
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+ports[2])
	p, err := ps.start("reference", bin, nil, env)
	if err != nil {
		return nil, "", err
	}
	return p, "127.0.0.1:" + ports[1], waitHTTP(ctx, p, "http://127.0.0.1:"+ports[0]+"/healthcheck")
}

// envoyBaseIDs makes each Envoy's --base-id unique on the machine.
var envoyBaseIDs int

// startEnvoy runs Envoy (--concurrency 1) on bootstrap(listen, admin) and
// waits for its /ready.
func startEnvoy(ctx context.Context, ps *procs, bin, name string, bootstrap func(listen, admin string) string) (*proc, string, error) {
	listen, err := ps.addr()
	if err != nil {
		return nil, "", err
	}
	admin, err := ps.addr()
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(ps.dir, strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(name)+".yaml")
	if err := os.WriteFile(path, []byte(bootstrap(listen, admin)), 0o644); err != nil {
		return nil, "", err
	}
	envoyBaseIDs++
	baseID := (os.Getpid()%(1<<22))<<8 | envoyBaseIDs%256
	p, err := ps.start("envoy for "+name, bin, []string{"-c", path, "--concurrency", "1",
		"--base-id", strconv.Itoa(baseID), "--log-level", "warn"}, benchproc.ChildEnv())
	if err != nil {
		return nil, "", err
	}
	return p, listen, waitHTTP(ctx, p, "http://"+admin+"/ready")
}

// envoyVersion is `envoy --version`'s version, or "unknown".
func envoyVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	// "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL"
	if _, v, ok := strings.Cut(string(out), "version: "); ok {
		if parts := strings.Split(strings.TrimSpace(v), "/"); len(parts) > 1 {
			return parts[1]
		}
	}
	return "unknown"
}
