package refserver

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// startTimeout bounds a start: generous, for a loaded machine.
const startTimeout = 30 * time.Second

// Options say how to start the reference.
type Options struct {
	// Rules are its rules files, by name.
	Rules map[string]string
	// Redis is its Redis' host:port; empty: a redis-server of its own.
	Redis string
	// Env adds to and overrides the settings Start gives.
	Env map[string]string
}

// Settings are the reference's settings Start gives besides addresses,
// Redis and the rules directory: statsd off, dynamic metadata and the
// rate-limit headers on, the rules read once from the app directory with
// dot files skipped. A test gives FastLimit the same.
func Settings() map[string]string {
	return map[string]string{
		"USE_STATSD": "false", "RESPONSE_DYNAMIC_METADATA": "true", "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
		"RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
	}
}

// Server is one running reference.
type Server struct {
	GRPC, HTTP, Debug string
	Conn              *grpc.ClientConn // for calls Client cannot make (raw bytes)
	Client            rlspb.RateLimitServiceClient
	p                 *child.Process
}

// Start starts the reference (Bin) as its README runs it, with Settings:
// rules under RUNTIME_ROOT/ratelimit/config, Redis over TCP, every
// listener on loopback, logs at info. It returns once gRPC serves, which the reference does only
// after its first rules load, good or bad (LoadError says which); it stops
// when t ends, its logs printed if t failed.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Bin(t)
	if o.Redis == "" {
		o.Redis = redistest.StartServer(t).Addr
	}
	root := t.TempDir()
	for name, body := range o.Rules {
		files.Write(t, filepath.Join(root, "ratelimit", "config", name), body)
	}
	port := func() string { return strconv.Itoa(loopback.Port(t)) }
	env := Settings()
	for k, v := range map[string]string{
		"LOG_LEVEL": "info", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "SINGLE", "REDIS_URL": o.Redis,
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
		"HOST": "127.0.0.1", "PORT": port(), "GRPC_HOST": "127.0.0.1", "GRPC_PORT": port(), "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": port(),
	} {
		env[k] = v
	}
	for k, v := range o.Env {
		env[k] = v
	}
	s := &Server{GRPC: "127.0.0.1:" + env["GRPC_PORT"], HTTP: "127.0.0.1:" + env["PORT"],
		Debug: "127.0.0.1:" + env["DEBUG_PORT"]}
	cmd := exec.Command(bin)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var err error
	if s.p, err = child.Start("envoyproxy/ratelimit", cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("envoyproxy/ratelimit %s logs:\n%s", s.GRPC, s.Logs())
		}
	})
	if err := s.waitServing(); err != nil {
		t.Fatalf("envoyproxy/ratelimit: %v; logs:\n%s", err, s.Logs())
	}
	conn, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s.Conn, s.Client = conn, rlspb.NewRateLimitServiceClient(conn)
	return s
}

// waitServing waits until /healthcheck answers: the reference opens its
// listeners, gRPC last, after its first rules load.
func (s *Server) waitServing() error {
	c := http.Client{Timeout: 5 * time.Second}
	ok := wait.True(startTimeout, func() bool {
		if !s.p.Alive() {
			return true
		}
		resp, err := c.Get("http://" + s.HTTP + "/healthcheck")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
		conn, err := net.DialTimeout("tcp", s.GRPC, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	})
	if !s.p.Alive() {
		return errors.New("exited at start")
	}
	if !ok {
		return fmt.Errorf("not serving after %v", startTimeout)
	}
	return nil
}

// loadError is the reference's log line for rules it refuses.
var loadError = regexp.MustCompile(`Error loading new configuration: ([^"\n]*)`)

// LoadError returns why the reference refused its rules (it then answers
// every request Unknown), or nil when it loaded them.
func (s *Server) LoadError() error {
	if m := loadError.FindStringSubmatch(s.Logs()); m != nil {
		return errors.New(m[1])
	}
	return nil
}

// Logs returns what the reference has written so far.
func (s *Server) Logs() string { return s.p.Output() }
