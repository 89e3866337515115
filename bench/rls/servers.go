package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/bench/benchproc"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// fastlimitModule is FastLimit's module path, as a binary's build
// information names it.
const fastlimitModule = "github.com/fastlimit/fastlimit"

// healthTimeout bounds the wait for a started server's /healthcheck.
const healthTimeout = 60 * time.Second

// kind is how a server binary is configured.
type kind int

const (
	// kindFastLimit takes flags: --config, --grpc-addr, --redis-url, ...
	kindFastLimit kind = iota
	// kindReference is configured like envoyproxy/ratelimit, by its
	// environment variables, with its rules under
	// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/.
	kindReference
	// kindNull is bench/nullrls: --grpc-addr and --http-addr, no Redis.
	kindNull
)

// role is what a server is in the run: what its figures are compared
// with.
type role string

const (
	roleFastLimit role = "fastlimit" // the server measured, first
	roleVariant   role = "variant"   // FastLimit with flags of its own (--variant)
	roleCompare   role = "compare"   // --compare
	roleNull      role = "null"      // --compare-null
)

// binary is a server under test.
type binary struct {
	name    string // column title: "FastLimit", "reference"
	path    string
	kind    kind
	role    role
	version string   // for the report
	built   bool     // built from this tree by bench/rls, into a temporary path
	args    []string // extra flags (FastLimit)
	env     []string // extra environment, KEY=VALUE
}

// supports says whether b has the algorithm of rule key: the reference
// has fixed windows only; the null server answers anything.
func (b *binary) supports(key string) bool {
	r, ok := ruleByKey(key)
	return b.kind != kindReference || ok && r.algorithm == ""
}

// inspect fills in b's kind and version from its Go build information: a
// FastLimit build is configured by flags, anything else as the reference.
func (b *binary) inspect() error {
	info, err := buildinfo.ReadFile(b.path)
	if err != nil {
		// Not a Go binary (or unreadable): configure it as the
		// reference, by environment.
		if _, statErr := os.Stat(b.path); statErr != nil {
			return fmt.Errorf("server binary: %w", statErr)
		}
		b.kind, b.version = kindReference, "unknown (no Go build information)"
		return nil
	}
	if info.Main.Path == fastlimitModule {
		b.kind = kindFastLimit
		if b.version == "" {
			b.version = vcsVersion(info)
		}
		return nil
	}
	b.kind = kindReference
	b.version = info.Main.Path + "@" + info.Main.Version + ", " + info.GoVersion
	return nil
}

// vcsVersion returns the short commit a Go binary was built from, marked
// -dirty when the tree had changes, or its module version.
func vcsVersion(info *buildinfo.BuildInfo) string {
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return info.Main.Version
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// buildFastLimit builds ./cmd/server of the tree at root into dir, with
// its version stamped as `git describe` says.
func buildFastLimit(ctx context.Context, root, dir string) (*binary, error) {
	version := treeVersion(ctx, root)
	path, err := build(ctx, root, "./cmd/server", filepath.Join(dir, "fastlimit"), "-ldflags", "-X main.Version="+version)
	if err != nil {
		return nil, err
	}
	return &binary{name: "FastLimit", path: path, kind: kindFastLimit, role: roleFastLimit, version: version, built: true}, nil
}

// buildNull builds ./bench/nullrls of the tree at root into dir.
func buildNull(ctx context.Context, root, dir string) (*binary, error) {
	path, err := build(ctx, root, "./bench/nullrls", filepath.Join(dir, "nullrls"))
	if err != nil {
		return nil, err
	}
	return &binary{name: "null server", path: path, kind: kindNull, role: roleNull, version: treeVersion(ctx, root), built: true}, nil
}

// treeVersion is what `git describe` says of the tree at root, or "dev".
func treeVersion(ctx context.Context, root string) string {
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "describe", "--tags", "--always", "--dirty").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return "dev"
}

// build runs go build of pkg in root into path.
func build(ctx context.Context, root, pkg, path string, flags ...string) (string, error) {
	// No -trimpath: the build shares Go's cache with go build, go test
	// and the e2e tests.
	args := append(append([]string{"build"}, flags...), "-o", path, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return path, nil
}

// server is one running server under test, with its own Redis (none for
// the null server).
type server struct {
	bin   *binary
	p     *proc
	grpc  string // host:port
	admin string // host:port of its pprof, "" unless --profile
	redis *redisDeploy
}

// startServer starts b on free loopback ports against rd (nil for the
// null server), with the rules written under rulesDir (see writeRules)
// and, with profile, pprof on an admin port, and waits until its
// /healthcheck answers 200.
func startServer(ctx context.Context, ps *procs, pp *benchproc.Ports, b *binary, rd *redisDeploy, rulesDir string, profile bool) (*server, error) {
	grpcPort, err := pp.Free()
	if err != nil {
		return nil, err
	}
	httpPort, err := pp.Free()
	if err != nil {
		return nil, err
	}
	grpcAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort))
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))
	var args, env []string
	adminAddr := ""
	switch b.kind {
	case kindFastLimit:
		url := "redis://" + rd.addrs[0] + "/0"
		redisType := "single"
		if rd.cluster {
			url, redisType = strings.Join(rd.addrs, ","), "cluster"
		}
		admin := []string{"--admin-addr="}
		if profile {
			port, err := pp.Free()
			if err != nil {
				return nil, err
			}
			adminAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			admin = []string{"--admin-addr", adminAddr, "--pprof"}
		}
		args = append(append([]string{
			"--config", filepath.Join(rulesDir, fastlimitRulesDir),
			"--grpc-addr", grpcAddr, "--http-addr", httpAddr,
			"--log-level", "warn", "--redis-type", redisType, "--redis-url", url,
		}, admin...), b.args...)
		env = benchproc.ChildEnv(b.env...)
	case kindNull:
		args = []string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr}
		if profile {
			port, err := pp.Free()
			if err != nil {
				return nil, err
			}
			adminAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			args = append(args, "--pprof-addr", adminAddr)
		}
		env = benchproc.ChildEnv(b.env...)
	case kindReference:
		debugPort, err := pp.Free()
		if err != nil {
			return nil, err
		}
		redisType := "SINGLE"
		if rd.cluster {
			redisType = "CLUSTER"
		}
		env = benchproc.ChildEnv(append(referenceEnv(rulesDir, redisType, strings.Join(rd.addrs, ","), grpcPort, httpPort, debugPort), b.env...)...)
	}
	p, err := ps.start(b.name+" server", b.path, args, env)
	if err != nil {
		return nil, err
	}
	s := &server{bin: b, p: p, grpc: grpcAddr, admin: adminAddr, redis: rd}
	if err := waitHealthy(ctx, p, "http://"+httpAddr+"/healthcheck"); err != nil {
		ps.stop(p)
		return nil, p.failure(err)
	}
	return s, nil
}

// referenceEnv configures envoyproxy/ratelimit: Redis over TCP, rules
// from rulesDir/reference/ratelimit/config/*.yaml, statsd off, every
// listener on loopback, warnings only.
func referenceEnv(rulesDir, redisType, redisURL string, grpcPort, httpPort, debugPort int) []string {
	return []string{
		"USE_STATSD=false",
		"LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_TYPE=" + redisType,
		"REDIS_URL=" + redisURL,
		"RUNTIME_ROOT=" + filepath.Join(rulesDir, referenceRulesRoot),
		"RUNTIME_SUBDIRECTORY=" + referenceRulesSub,
		"HOST=127.0.0.1",
		"PORT=" + strconv.Itoa(httpPort),
		"GRPC_HOST=127.0.0.1",
		"GRPC_PORT=" + strconv.Itoa(grpcPort),
		"DEBUG_HOST=127.0.0.1",
		"DEBUG_PORT=" + strconv.Itoa(debugPort),
	}
}

// waitHealthy polls url until it answers 200, p exits, or healthTimeout.
func waitHealthy(ctx context.Context, p *proc, url string) error {
	client := &http.Client{Timeout: time.Second}
	return wait.Until(ctx, healthTimeout, func() error {
		if !p.alive() {
			return errors.New("exited")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// usage reads the CPU the server and its Redis have used so far.
func (s *server) usage(ctx context.Context) (time.Duration, benchproc.RedisStats, error) {
	cpu, err := s.cpu()
	if err != nil || s.redis == nil {
		return cpu, benchproc.RedisStats{}, err
	}
	rs, err := s.redis.stats(ctx)
	return cpu, rs, err
}

// stop stops the server and its Redis.
func (s *server) stop(ps *procs) {
	ps.stop(s.p)
	if s.redis != nil {
		s.redis.stop(ps)
	}
}

// cpu returns the server process' CPU time so far.
func (s *server) cpu() (time.Duration, error) {
	if !s.p.alive() {
		return 0, s.p.failure(errors.New("exited during the run"))
	}
	return benchproc.ProcCPU(s.p.pid())
}
