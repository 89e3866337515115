package connlimit_test

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/edge/connlimit"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// patience bounds every wait for something that must happen.
const patience = 10 * time.Second

// serve accepts from l until it is closed, handing each connection to
// conns.
func serve(t *testing.T, l net.Listener) <-chan net.Conn {
	t.Helper()
	conns := make(chan net.Conn, 1000)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return conns
}

func listen(t *testing.T, n int) *connlimit.Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return connlimit.New(inner, n)
}

// refused dials l and reports whether the server closed the connection:
// the dial is reset, or a read ends with EOF or a reset, not a timeout,
// within patience.
func refused(l net.Listener) bool {
	c, err := net.DialTimeout("tcp", l.Addr().String(), patience)
	if err != nil {
		return errors.Is(err, syscall.ECONNRESET) // reset before the dial returned
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func accepted(t *testing.T, conns <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-conns:
		return c
	case <-time.After(patience):
		t.Fatal("no connection accepted")
		return nil
	}
}

func waitStats(t *testing.T, l *connlimit.Listener, ok func(connlimit.Stats) bool) connlimit.Stats {
	t.Helper()
	var st connlimit.Stats
	if !wait.True(patience, func() bool { st = l.Stats(); return ok(st) }) {
		t.Fatalf("stats %+v", st)
	}
	return st
}

// TestCapRefusesAndRecovers opens connections up to a cap of 3: the
// next ones are refused and counted; once one closes, a new one is
// accepted; once all close, nothing is held.
func TestCapRefusesAndRecovers(t *testing.T) {
	l := listen(t, 3)
	conns := serve(t, l)
	var held []net.Conn
	for range 3 {
		loopback.Dial(t, l.Addr().String())
		held = append(held, accepted(t, conns))
	}
	for i := range 2 {
		if !refused(l) {
			t.Fatalf("connection %d past the cap was not closed", i+4)
		}
	}
	st := waitStats(t, l, func(s connlimit.Stats) bool { return s.Refused == 2 })
	if st.Open != 3 || st.Accepted != 3 || st.Max != 3 {
		t.Fatalf("at the cap: %+v", st)
	}

	if err := held[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := held[0].Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatal(err) // a second Close frees nothing more
	}
	loopback.Dial(t, l.Addr().String())
	held[0] = accepted(t, conns)
	if st := l.Stats(); st.Open != 3 || st.Accepted != 4 || st.Refused != 2 {
		t.Fatalf("after one closed and another came: %+v", st)
	}
	for _, c := range held {
		_ = c.Close()
	}
	if st := l.Stats(); st.Open != 0 {
		t.Fatalf("all closed: %+v", st)
	}
}

// TestAcceptNeverWaits: at the cap, a flood of 200 connections is
// refused one by one by the same Accept loop, none left waiting in the
// kernel's backlog, and the held connections stay open.
func TestAcceptNeverWaits(t *testing.T) {
	const n, flood = 4, 200
	l := listen(t, n)
	conns := serve(t, l)
	var held []net.Conn
	for range n {
		loopback.Dial(t, l.Addr().String())
		held = append(held, accepted(t, conns))
	}
	var wg sync.WaitGroup
	var notRefused atomic.Int32
	for range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !refused(l) {
				notRefused.Add(1)
			}
		}()
	}
	wg.Wait()
	if k := notRefused.Load(); k != 0 {
		t.Fatalf("%d of %d connections past the cap were not refused", k, flood)
	}
	st := waitStats(t, l, func(s connlimit.Stats) bool { return s.Refused == flood })
	if st.Open != n {
		t.Fatalf("after the flood: %+v", st)
	}
	for _, c := range held {
		_ = c.SetWriteDeadline(time.Now().Add(patience))
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatalf("a held connection broke: %v", err)
		}
	}
}

// TestCapUnderChurn: 32 clients connect and disconnect at once, over a
// cap of 8: the server never holds more than 8, and every connection is
// either served or refused.
func TestCapUnderChurn(t *testing.T) {
	const n, clients, rounds = 8, 32, 20
	l := listen(t, n)
	conns := serve(t, l)
	var live, most atomic.Int64
	go func() {
		for c := range conns {
			k := live.Add(1)
			for m := most.Load(); k > m && !most.CompareAndSwap(m, k); m = most.Load() {
			}
			go func() {
				_, _ = io.Copy(io.Discard, c) // until the client leaves
				live.Add(-1)                  // before Close frees the place
				_ = c.Close()
			}()
		}
	}()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				c, err := net.DialTimeout("tcp", l.Addr().String(), patience)
				if err != nil {
					continue // refused: reset before the dial returned
				}
				_, _ = c.Write([]byte("hello"))
				_ = c.Close()
			}
		}()
	}
	wg.Wait()
	st := waitStats(t, l, func(s connlimit.Stats) bool { return s.Open == 0 && s.Accepted+s.Refused == clients*rounds })
	if m := most.Load(); m > n {
		t.Fatalf("the server held %d connections at once, cap %d", m, n)
	}
	t.Logf("%d accepted, %d refused; at most %d held", st.Accepted, st.Refused, most.Load())
}

func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    connlimit.Budget
		want int
		err  bool
	}{
		{"defaults", connlimit.Budget{Files: 1024, Redis: 20, HTTP: 100}, 1024 - 20 - 100 - connlimit.DefaultReserve, false},
		{"own reserve", connlimit.Budget{Files: 1024, Redis: 20, HTTP: 100, Reserve: 4}, 900, false},
		{"max bounds a large limit", connlimit.Budget{Files: 1 << 20, Redis: 20, HTTP: 100, Max: 10000}, 10000, false},
		{"just enough", connlimit.Budget{Files: 100, Redis: 10, HTTP: 10, Reserve: 64}, connlimit.MinCap, false},
		{"too few", connlimit.Budget{Files: 99, Redis: 10, HTTP: 10, Reserve: 64}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.b.Cap()
			switch {
			case tc.err && !errors.Is(err, connlimit.ErrTooFewFiles):
				t.Fatalf("Cap() = %d, %v; want ErrTooFewFiles", got, err)
			case !tc.err && (err != nil || got != tc.want):
				t.Fatalf("Cap() = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestOpenFilesLimit reads the limit of this process and a Budget built
// on it.
func TestOpenFilesLimit(t *testing.T) {
	n, err := connlimit.OpenFilesLimit()
	if err != nil {
		t.Skipf("no open-files limit here: %v", err)
	}
	if n <= 0 {
		t.Fatalf("OpenFilesLimit = %d", n)
	}
	if b, err := os.ReadFile("/proc/self/limits"); err == nil {
		t.Logf("limit %d; /proc/self/limits:\n%s", n, b)
	}
	got, err := connlimit.Budget{Redis: 10}.Cap()
	if n >= 10+connlimit.DefaultReserve+connlimit.MinCap && (err != nil || got != n-10-connlimit.DefaultReserve) {
		t.Fatalf("Budget{Redis: 10}.Cap() = %d, %v with a limit of %d", got, err, n)
	}
}
