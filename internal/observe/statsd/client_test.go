package statsd_test

import (
	"bufio"
	"context"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/fastlimit/fastlimit/internal/observe/statsd"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
)

// udpServer is a statsd server on a loopback UDP port: it collects the
// lines of every datagram it receives, and the datagrams' sizes.
type udpServer struct {
	conn  *net.UDPConn
	lines chan string
	sizes chan int
}

// newUDPClient returns a UDP statsd server, and a store with a client
// sending to it, closed when the test ends.
func newUDPClient(t *testing.T) (*udpServer, *statsd.Store, *statsd.Client) {
	t.Helper()
	srv := newUDPServer(t)
	st := statsd.NewStore()
	c, err := statsd.NewClient(st, statsd.Options{Network: "udp", Addr: srv.conn.LocalAddr().String()}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return srv, st, c
}

// none fails the test if a line arrives within 100 ms; format names the
// case, with a %q for the line.
func (s *udpServer) none(t *testing.T, format string) {
	t.Helper()
	select {
	case l := <-s.lines:
		t.Errorf(format, l)
	case <-time.After(100 * time.Millisecond):
	}
}

func newUDPServer(t *testing.T) *udpServer {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &udpServer{conn: conn, lines: make(chan string, 10000), sizes: make(chan int, 1000)}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			s.sizes <- n
			for _, l := range strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n") {
				s.lines <- l
			}
		}
	}()
	return s
}

// take returns n lines, failing the test if they do not come in time.
func take(t *testing.T, ch chan string, n int) []string {
	t.Helper()
	var got []string
	timeout := time.After(5 * time.Second)
	for len(got) < n {
		select {
		case l := <-ch:
			got = append(got, l)
		case <-timeout:
			t.Fatalf("got %d lines %q, want %d", len(got), got, n)
		}
	}
	slices.Sort(got)
	return got
}

// stat is a parsed statsd line.
type stat struct {
	name  string
	value string
	typ   string
	tags  string
}

var lineRE = regexp.MustCompile(`^([^:|]+):(\d+)\|(c|g|ms)(?:\|#(.*))?$`)

func parse(t *testing.T, line string) stat {
	t.Helper()
	m := lineRE.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("line %q is not a statsd line", line)
	}
	return stat{m[1], m[2], m[3], m[4]}
}

func TestUDPGostats(t *testing.T) {
	srv := newUDPServer(t)
	st := statsd.NewStore()
	c, err := statsd.NewClient(st, statsd.Options{Network: "udp", Addr: srv.conn.LocalAddr().String(),
		Tags: []statsd.Tag{{"zone", "eu.west:1"}, {"app", "rl"}, {"empty", ""}}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	st.Counter("ratelimit.service.rate_limit.d.k.total_hits").Add(3)
	st.Counter("ratelimit.service.rate_limit.d.k.over_limit").Add(1)
	st.Counter("ratelimit.service.rate_limit.d.k.near_limit") // zero: not sent
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := take(t, srv.lines, 2)
	want := []stat{
		{"ratelimit.service.rate_limit.d.k.over_limit.__app=rl.__zone=eu_west_1", "1", "c", ""},
		{"ratelimit.service.rate_limit.d.k.total_hits.__app=rl.__zone=eu_west_1", "3", "c", ""},
	}
	for i, l := range got {
		if s := parse(t, l); s != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, s, want[i])
		}
	}
	// A second flush sends only what was counted since.
	st.Counter("ratelimit.service.rate_limit.d.k.total_hits").Add(2)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := parse(t, take(t, srv.lines, 1)[0]); s.value != "2" || !strings.HasPrefix(s.name, "ratelimit.service.rate_limit.d.k.total_hits") {
		t.Errorf("second flush sent %+v, want total_hits 2", s)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	srv.none(t, "a flush with nothing counted sent %q")
}

func TestUDPDatagramsStayUnderMTU(t *testing.T) {
	srv, st, c := newUDPClient(t)
	const n = 300
	for i := range n {
		st.Counter("ratelimit.service.rate_limit.domain.key_" + strings.Repeat("v", i%40) + "_" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + ".total_hits").Add(uint64(i + 1))
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := take(t, srv.lines, n)
	var sum int
	for _, l := range got {
		s := parse(t, l)
		v := 0
		for _, d := range s.value {
			v = v*10 + int(d-'0')
		}
		sum += v
	}
	if want := n * (n + 1) / 2; sum != want {
		t.Errorf("values sum to %d, want %d", sum, want)
	}
	close(srv.sizes)
	datagrams := 0
	for size := range srv.sizes {
		datagrams++
		if size > 1432 {
			t.Errorf("datagram of %d bytes, more than 1432", size)
		}
	}
	if datagrams < 2 {
		t.Errorf("%d datagrams for %d lines, want them split", datagrams, n)
	}
}

func TestTCPDogStatsDWithMogrifier(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	lines := make(chan string, 100)
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
		}
	}()
	st := statsd.NewStore()
	c, err := statsd.NewClient(st, statsd.Options{
		Network: "tcp", Addr: lis.Addr().String(), Format: statsd.DogStatsD,
		Tags: []statsd.Tag{{"env", "prod"}},
		Mogrifiers: []statsd.Mogrifier{{
			Pattern: regexp.MustCompile(`^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`),
			Name:    "ratelimit.service.rate_limit.$3",
			Tags:    []statsd.Tag{{"domain", "$1"}, {"descriptor", "$2"}},
		}},
	}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st.Counter("ratelimit.service.rate_limit.web.path_login.over_limit").Add(7)
	st.Counter("ratelimit.service.config_load_success").Add(1)
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := take(t, lines, 2)
	want := []stat{
		{"ratelimit.service.config_load_success", "1", "c", "env:prod"},
		{"ratelimit.service.rate_limit.over_limit", "7", "c", "env:prod,domain:web,descriptor:path_login"},
	}
	for i, l := range got {
		if s := parse(t, l); s != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, s, want[i])
		}
	}
}

// TestFailedFlushKeepsCounts checks that counts a flush could not send
// go with the next flush, once the server is back.
func TestFailedFlushKeepsCounts(t *testing.T) {
	addr := loopback.Addr(t) // nothing listens: the first flush fails
	st := statsd.NewStore()
	c, err := statsd.NewClient(st, statsd.Options{Network: "tcp", Addr: addr, Timeout: time.Second}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st.Counter("a.b").Add(5)
	if err := c.Flush(context.Background()); err == nil {
		t.Fatal("flush to a closed port succeeded")
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	defer lis.Close()
	lines := make(chan string, 10)
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			return
		}
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	st.Counter("a.b").Add(1)
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := take(t, lines, 1)[0]; got != "a.b:6|c" {
		t.Errorf("line %q, want a.b:6|c", got)
	}
}

func TestRunFlushesOnTicksAndAtEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every time.Duration
	}{{"tick", 20 * time.Millisecond}, {"end", time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newUDPServer(t)
			st := statsd.NewStore()
			c, err := statsd.NewClient(st, statsd.Options{Network: "udp", Addr: srv.conn.LocalAddr().String()}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			st.Counter("n").Add(4)
			go func() { c.Run(ctx, tc.every); close(done) }()
			if tc.every == time.Hour {
				// No tick comes: only the flush at the end sends it.
				cancel()
				<-done
			}
			if got := take(t, srv.lines, 1)[0]; got != "n:4|c" {
				t.Errorf("flush sent %q, want n:4|c", got)
			}
		})
	}
}

func TestNewClientErrors(t *testing.T) {
	st := statsd.NewStore()
	for _, o := range []statsd.Options{
		{Network: "sctp", Addr: "127.0.0.1:8125"},
		{Network: "udp", Addr: "localhost"},
	} {
		if _, err := statsd.NewClient(st, o, zaptest.NewLogger(t)); err == nil {
			t.Errorf("NewClient(%+v) succeeded", o)
		}
	}
}

func TestParseTags(t *testing.T) {
	got, err := statsd.ParseTags("a:1,b:x:y")
	if err != nil || !slices.Equal(got, []statsd.Tag{{"a", "1"}, {"b", "x:y"}}) {
		t.Errorf("ParseTags = %v, %v", got, err)
	}
	for _, bad := range []string{"a", "a:1,", ":v"} {
		if _, err := statsd.ParseTags(bad); err == nil {
			t.Errorf("ParseTags(%q) succeeded", bad)
		}
	}
	if got, err := statsd.ParseTags(""); err != nil || got != nil {
		t.Errorf("ParseTags(\"\") = %v, %v", got, err)
	}
}
