package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// binary is the server built once for the whole package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fastlimit-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "fastlimit")
	build := exec.Command("go", "build", "-o", binary, "../cmd/server")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build server:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// fastlimit is one server process.
type fastlimit struct {
	GRPC, HTTP string
	Admin      string // the admin listener's address, when known
	cmd        *exec.Cmd
	exited     chan struct{} // closed when cmd has exited (child.Run)
	logs       *child.Output
	conn       *grpc.ClientConn
	Client     rls.RateLimitServiceClient
}

// launch says how to start the binary.
type launch struct {
	// rules is the --config directory of a start with flags.
	rules string
	// flags come after the harness's defaults (loopback ports, console
	// logs, --store-timeout 2s, --drain 0s), so they win.
	flags []string
	// env is the environment besides PATH.
	env map[string]string
	// envOnly starts the binary with no arguments and env alone, as
	// Kubernetes does: the addresses come from env (PORT, GRPC_PORT,
	// DEBUG_PORT, or HTTP_ADDR, GRPC_ADDR, ADMIN_ADDR), and those it
	// lacks are set to free loopback ports.
	envOnly bool
	// wait is what start waits for: the default waits for /healthcheck
	// to answer 200.
	wait waitMode
	// noDial leaves the gRPC client to the caller (TLS).
	noDial bool
	// nofile, when set, is the open-files limit (soft and hard) the
	// binary runs under.
	nofile int
}

type waitMode int

const (
	waitHealthy waitMode = iota // /healthcheck answers 200
	waitUp                      // the HTTP port answers at all
	waitNone                    // only start the process
)

// start starts the binary as l says; it stops when the test ends, and
// its logs are printed if the test failed. Every e2e test starts the
// server through it.
func start(t testing.TB, l launch) *fastlimit {
	t.Helper()
	f := &fastlimit{logs: &child.Output{}}
	var args []string
	env := map[string]string{}
	if l.envOnly {
		f.envAddresses(t, l.env, env)
	} else {
		f.GRPC, f.HTTP = loopback.Addr(t), loopback.Addr(t)
		args = append([]string{"--config", l.rules, "--grpc-addr", f.GRPC, "--http-addr", f.HTTP,
			"--log-format", "console", "--log-level", "info", "--admin-addr", "127.0.0.1:0",
			// Correctness tests must not fail on a loaded machine: a test
			// of timeouts passes its own --store-timeout, which wins.
			"--store-timeout", "2s",
			// Stopping a server must not wait out the default drain; a
			// test of draining passes its own --drain, which wins.
			"--drain", "0s"}, l.flags...)
	}
	for k, v := range l.env {
		env[k] = v
	}
	f.cmd = exec.Command(binary, args...)
	if l.nofile > 0 {
		// The shell lowers the limit and execs the binary in its place.
		f.cmd = exec.Command("sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, l.nofile), binary}, args...)...)
	}
	f.cmd.Stdout, f.cmd.Stderr = f.logs, f.logs
	f.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		f.cmd.Env = append(f.cmd.Env, k+"="+v)
	}
	// child.Run starts it from a thread that lives as long as it does:
	// started from any thread, the parent-death signal killed the server
	// when that thread went (one a child.Run of an Envoy had locked and
	// ended: TestRLQSClientIdentity's server refused connections beside
	// the Envoy tests).
	f.exited = make(chan struct{})
	if err := child.Run(f.cmd, f.exited); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Stop()
		if t.Failed() {
			t.Logf("server %s logs:\n%s", f.GRPC, f.logs.String())
		}
	})
	if l.wait != waitNone && !wait.True(15*time.Second, func() bool {
		code := httpCode(f.HTTP + "/healthcheck")
		return code == http.StatusOK || l.wait == waitUp && code != 0
	}) {
		t.Fatalf("server did not come up; logs:\n%s", f.logs.String())
	}
	if !l.noDial {
		conn, err := grpc.NewClient(f.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		f.conn, f.Client = conn, rls.NewRateLimitServiceClient(conn)
	}
	return f
}

// envAddresses sets f's addresses from the reference's variables in given,
// or FastLimit's, or chooses free ones for FastLimit's and adds them to env.
func (f *fastlimit) envAddresses(t testing.TB, given, env map[string]string) {
	t.Helper()
	pick := func(addr, port, def string) string {
		if v := given[port]; v != "" {
			return "127.0.0.1:" + v
		}
		if v := given[addr]; v != "" {
			return v
		}
		env[addr] = def
		return def
	}
	f.HTTP = pick("HTTP_ADDR", "PORT", loopback.Addr(t))
	f.GRPC = pick("GRPC_ADDR", "GRPC_PORT", loopback.Addr(t))
	f.Admin = pick("ADMIN_ADDR", "DEBUG_PORT", loopback.Addr(t))
}

// envMap reads "NAME=value" pairs.
func envMap(pairs ...string) map[string]string {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return m
}

// runToExit runs the binary with args and env (besides PATH) to its exit,
// killing it after 15 s, and returns its output: for commands (check) and
// starts that must fail.
func runToExit(env map[string]string, args ...string) (string, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = child.Attr()
	var out child.Output
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), errors.New("still running after 15s")
	}
}

// startServer starts the binary with rules from dir and extra flags, and
// waits until /healthcheck answers 200 (or, with wantHealthy false, until
// the HTTP port answers at all).
func startServer(t testing.TB, rulesDir string, wantHealthy bool, extra ...string) *fastlimit {
	t.Helper()
	l := launch{rules: rulesDir, flags: extra}
	if !wantHealthy {
		l.wait = waitUp
	}
	return start(t, l)
}

// httpCode is the status of GET http://addrPath, 0 when it fails or takes
// over 10 s.
func httpCode(addrPath string) int {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addrPath)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Stop sends SIGTERM and waits for the process (idempotent).
func (f *fastlimit) Stop() {
	if f.conn != nil {
		f.conn.Close()
		f.conn = nil
	}
	if f.cmd != nil && f.cmd.Process != nil {
		_ = f.cmd.Process.Signal(os.Interrupt)
		select {
		case <-f.exited:
		case <-time.After(10 * time.Second):
			_ = f.cmd.Process.Kill()
			<-f.exited
		}
		f.cmd = nil
	}
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// loop calls call(worker, n) from workers goroutines, each call after the
// worker's last (n counts them), one every pause at most, until stop is
// called. stop waits for the workers; it is idempotent.
// nextWindow waits until a window of unit starts on the wall clock, and
// margin more. The servers' fixed windows follow the wall clock, so that
// calls made within unit of it share a window: the time waited for is the
// condition, not a guess at how long something takes.
func nextWindow(unit, margin time.Duration) {
	at := time.NewTimer(time.Until(time.Now().Truncate(unit).Add(unit + margin)))
	<-at.C
}

// clearOfWindowEnd waits for the next window of unit if the current one
// ends within margin.
func clearOfWindowEnd(t *testing.T, unit, margin time.Duration) {
	if left := time.Until(time.Now().Truncate(unit).Add(unit)); left < margin {
		t.Logf("waiting %v for the %v window to roll over", left.Round(time.Millisecond), unit)
		nextWindow(unit, time.Second)
	}
}

func loop(workers int, pause time.Duration, call func(worker, n int)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var pace <-chan time.Time // nil: back to back
			if pause > 0 {
				tk := time.NewTicker(pause)
				defer tk.Stop()
				pace = tk.C
			}
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				call(w, n)
				if pace != nil {
					select {
					case <-done:
						return
					case <-pace:
					}
				}
			}
		})
	}
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
