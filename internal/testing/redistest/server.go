package redistest

import (
	"os"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/procstat"
)

// Server is a redis-server of one test's own, from StartServer.
type Server struct {
	Addr string // 127.0.0.1:Port
	Port int
	path string
	argv []string
	dir  string
	p    *proc
}

// StartServer starts a redis-server of t's own on a free loopback port,
// without persistence, with extra arguments (TLS, ACL users, ...). It
// stops when t ends, and on Linux it also dies with the test binary. It
// skips t when redis-server is missing, or fails it with
// FASTLIMIT_REQUIRE_REDIS=1.
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	path := lookPath(t, "redis-server")
	s := &Server{path: path}
	s.dir = setupDir(t, "server", s.Logs, s.remove)
	var err error
	s.p, err = startProc("server", path, s.dir, func(port int, dir string) ([]string, error) {
		s.Port, s.argv = port, append(nodeArgs(port, dir), extra...)
		return s.argv, nil
	})
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	s.Addr = s.p.addr
	return s
}

// Logs returns the last lines of the server's output.
func (s *Server) Logs() string {
	if s.p == nil {
		return ""
	}
	return logs([]*proc{s.p}, 40)
}

// remove kills the server and removes its directory.
func (s *Server) remove() {
	if s.p != nil {
		s.p.Kill()
	}
	_ = os.RemoveAll(s.dir)
}

// Stop kills the server with SIGKILL, as a crash would. It is idempotent.
func (s *Server) Stop() { s.p.Kill() }

// Restart stops the server if it runs and starts it again on the same
// port with the same arguments, without the data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.p.Kill()
	p, err := launch(s.p.Name, s.path, s.Addr, s.p.dir, s.argv)
	if err != nil {
		t.Fatalf("restart redis-server on port %d: %v", s.Port, err)
	}
	s.p = p
}

// Signal sends sig to the server process: SIGSTOP freezes it, SIGCONT
// thaws it.
func (s *Server) Signal(sig os.Signal) error { return s.p.Signal(sig) }

// CPU returns the CPU time (used_cpu_sys + used_cpu_user) the server at
// addr has used so far, from its INFO.
func CPU(t testing.TB, addr string) time.Duration {
	t.Helper()
	info, err := doString(addr, "INFO", "cpu", "stats")
	if err != nil {
		t.Fatalf("INFO of %s: %v", addr, err)
	}
	st, err := procstat.ParseInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	return st.CPU
}
