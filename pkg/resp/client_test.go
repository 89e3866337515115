package resp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/redistest"
	"github.com/fastlimit/fastlimit/pkg/resp"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newClient(t *testing.T, o resp.Options) *resp.Client {
	t.Helper()
	if o.Addr == "" {
		o.Addr = redistest.Addr(t)
	}
	c := resp.New(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// do sends one command and returns its reply's copy.
func do(ctx context.Context, c *resp.Client, args ...string) (resp.Reply, error) {
	b := c.Batch()
	defer c.Release(b)
	b.Command(len(args))
	for _, a := range args {
		b.String(a)
	}
	if err := c.Do(ctx, b); err != nil {
		return resp.Reply{}, err
	}
	r := *b.Reply(0)
	r.Str = append([]byte(nil), r.Str...)
	r.Ints = append([]int64(nil), r.Ints...)
	return r, nil
}

func TestDo(t *testing.T) {
	c := newClient(t, resp.Options{})
	ctx := context.Background()
	key := "resp-test:" + t.Name()
	t.Cleanup(func() { _, _ = do(ctx, c, "DEL", key) })

	b := c.Batch()
	b.Command(1)
	b.String("PING")
	b.Command(3)
	b.String("SET")
	b.String(key)
	b.Int(41)
	b.Command(2)
	b.String("INCR")
	b.Bytes([]byte(key))
	b.Command(2)
	b.String("GET")
	b.String(key)
	b.Command(1)
	b.String("NOSUCHCOMMAND")
	b.Command(4)
	b.String("EVAL")
	b.String("return {1, -2, ARGV[1] + 0}")
	b.Int(0)
	b.Int(1 << 52)
	if err := c.Do(ctx, b); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"PING", b.Reply(0).Kind == resp.KindStatus && string(b.Reply(0).Str) == "PONG"},
		{"SET", string(b.Reply(1).Str) == "OK"},
		{"INCR", b.Reply(2).Kind == resp.KindInt && b.Reply(2).Int == 42},
		{"GET", b.Reply(3).Kind == resp.KindBulk && string(b.Reply(3).Str) == "42"},
		{"unknown command", b.Reply(4).Err() != nil && b.Reply(4).HasErrorPrefix("ERR")},
		{"EVAL", fmt.Sprint(b.Reply(5).Ints) == fmt.Sprint([]int64{1, -2, 1 << 52})},
	}
	for i, ch := range checks {
		if !ch.ok {
			t.Errorf("%s: reply %+v", ch.what, *b.Reply(i))
		}
	}
	c.Release(b)

	// An incomplete batch is refused before anything is sent.
	b = c.Batch()
	b.Command(2)
	b.String("GET")
	if err := c.Do(ctx, b); !errors.Is(err, resp.ErrBatch) {
		t.Errorf("Do(incomplete batch) = %v, want ErrBatch", err)
	}
	if err := c.Do(ctx, c.Batch()); !errors.Is(err, resp.ErrBatch) {
		t.Errorf("Do(empty batch) = %v, want ErrBatch", err)
	}
}

// TestConcurrentPipelines: many goroutines share two connections; every
// reply reaches its own batch, in order, and every command runs once.
func TestConcurrentPipelines(t *testing.T) {
	c := newClient(t, resp.Options{Conns: 2})
	ctx := context.Background()
	const workers, calls, perBatch = 32, 200, 3
	prefix := "resp-test:pipelines:"
	t.Cleanup(func() {
		for w := range workers {
			_, _ = do(ctx, c, "DEL", prefix+strconv.Itoa(w))
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			key := prefix + strconv.Itoa(w)
			next := int64(1)
			for range calls {
				b := c.Batch()
				for range perBatch {
					b.Command(2)
					b.String("INCR")
					b.String(key)
				}
				if err := c.Do(ctx, b); err != nil {
					t.Error(err)
					return
				}
				for i := range perBatch {
					if r := b.Reply(i); r.Kind != resp.KindInt || r.Int != next {
						t.Errorf("worker %d: reply %+v, want %d", w, *r, next)
						return
					}
					next++
				}
				c.Release(b)
			}
		})
	}
	wg.Wait()
	for w := range workers {
		r, err := do(ctx, c, "GET", prefix+strconv.Itoa(w))
		if want := strconv.Itoa(calls * perBatch); err != nil || string(r.Str) != want {
			t.Errorf("worker %d: GET = %q, %v; want %s", w, r.Str, err, want)
		}
	}
}

func TestAuthAndSelect(t *testing.T) {
	const password = "s3cr3t-Pa55"
	addr := redistest.StartServer(t, "--user", "bob", "on", ">"+password, "~*", "+@all")
	ctx := context.Background()
	// After start, which checks the server with a PING of its own.
	if r, err := do(ctx, newClient(t, resp.Options{Addr: addr}), "CONFIG", "SET", "requirepass", password); err != nil || r.Err() != nil {
		t.Fatalf("CONFIG SET requirepass = %+v, %v", r, err)
	}
	for _, tc := range []struct {
		name string
		o    resp.Options
		ok   bool
	}{
		{"password", resp.Options{Addr: addr, Password: password, DB: 3}, true},
		{"user", resp.Options{Addr: addr, Username: "bob", Password: password}, true},
		{"wrong password", resp.Options{Addr: addr, Password: password + "x"}, false},
		{"no password", resp.Options{Addr: addr}, false},
		{"no such database", resp.Options{Addr: addr, Password: password, DB: 99}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.o)
			r, err := do(ctx, c, "CLIENT", "INFO")
			if tc.ok {
				if err != nil || r.Err() != nil {
					t.Fatalf("CLIENT INFO = %+v, %v", r, err)
				}
				if want := fmt.Sprintf(" db=%d ", tc.o.DB); !containsBytes(r.Str, want) {
					t.Errorf("CLIENT INFO = %s, want %q", r.Str, want)
				}
				return
			}
			// NOAUTH either fails the handshake or, with no password,
			// answers the command with an error.
			if err == nil && r.Err() == nil {
				t.Fatalf("CLIENT INFO = %s, want an error", r.Str)
			}
			if err != nil && (containsBytes([]byte(err.Error()), password) || !errors.Is(err, resp.ErrConn)) {
				t.Errorf("error %v: want ErrConn, without the password", err)
			}
		})
	}
}

func containsBytes(b []byte, s string) bool { return strings.Contains(string(b), s) }

// proxy forwards connections to a Redis server; its behaviour can be
// switched while connections are open.
type proxy struct {
	t      *testing.T
	ln     net.Listener
	target string
	mode   atomic.Int32 // proxyForward, proxyDropReplies, proxySilent
	conns  atomic.Int32
}

const (
	proxyForward     = iota
	proxyDropReplies // forward commands, then close the client's connection instead of replying
	proxySilent      // forward nothing, answer nothing
)

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	go p.serve()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.conns.Add(1)
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		go func() { // client -> server
			defer client.Close()
			defer server.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if err != nil {
					return
				}
				if p.mode.Load() == proxySilent {
					continue
				}
				if _, err := server.Write(buf[:n]); err != nil {
					return
				}
			}
		}()
		go func() { // server -> client
			defer client.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := server.Read(buf)
				if err != nil {
					return
				}
				if p.mode.Load() == proxyDropReplies {
					_ = client.Close()
					return
				}
				if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
		}()
	}
}

// TestNeverResends: a batch whose replies are lost fails with ErrConn,
// its commands ran once, and the next batch dials again.
func TestNeverResends(t *testing.T) {
	addr := redistest.Addr(t)
	p := newProxy(t, addr)
	c := newClient(t, resp.Options{Addr: p.addr(), Conns: 1})
	direct := newClient(t, resp.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := "resp-test:resend"
	t.Cleanup(func() { _, _ = do(context.Background(), direct, "DEL", key) })
	if _, err := do(ctx, c, "SET", key, "0"); err != nil {
		t.Fatal(err)
	}

	p.mode.Store(proxyDropReplies)
	_, err := do(ctx, c, "INCR", key)
	if !errors.Is(err, resp.ErrConn) {
		t.Fatalf("INCR with its reply lost = %v, want ErrConn", err)
	}
	// Redis ran it once; give a re-send the chance to show.
	time.Sleep(100 * time.Millisecond)
	if r, err := do(ctx, direct, "GET", key); err != nil || string(r.Str) != "1" {
		t.Errorf("counter = %q, %v; want 1 (ran exactly once)", r.Str, err)
	}

	p.mode.Store(proxyForward)
	if r, err := do(ctx, c, "INCR", key); err != nil || r.Int != 2 {
		t.Errorf("INCR after the failure = %+v, %v; want 2", r, err)
	}
	if n := p.conns.Load(); n != 2 {
		t.Errorf("%d connections made, want 2 (one redial)", n)
	}
}

// TestSilentServer: a caller gives up at its deadline; the connection is
// closed once its oldest batch has waited ReadTimeout, failing the others,
// and the client then recovers.
func TestSilentServer(t *testing.T) {
	p := newProxy(t, redistest.Addr(t))
	c := newClient(t, resp.Options{Addr: p.addr(), Conns: 1, ReadTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	if _, err := do(ctx, c, "PING"); err != nil {
		t.Fatal(err)
	}
	p.mode.Store(proxySilent)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := do(short, c, "PING"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("PING to a silent server = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("PING returned after %v, want about 50ms", d)
	}

	start = time.Now()
	_, err := do(ctx, c, "PING") // no deadline of its own
	if !errors.Is(err, resp.ErrConn) {
		t.Errorf("PING with no deadline = %v, want ErrConn from the read timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the dead connection was closed after %v, want about 300ms", d)
	}

	p.mode.Store(proxyForward)
	if r, err := do(ctx, c, "PING"); err != nil || string(r.Str) != "PONG" {
		t.Errorf("PING after recovery = %+v, %v", r, err)
	}
}

func TestDialErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	c := newClient(t, resp.Options{Addr: closed, DialTimeout: 200 * time.Millisecond})
	start := time.Now()
	if _, err := do(context.Background(), c, "PING"); !errors.Is(err, resp.ErrConn) {
		t.Errorf("PING to a closed port = %v, want ErrConn", err)
	}
	if err := c.Connect(context.Background()); !errors.Is(err, resp.ErrConn) {
		t.Errorf("Connect to a closed port = %v, want ErrConn", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("failing took %v", d)
	}

	// A server that accepts but never answers the handshake.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, conn) }()
		}
	}()
	c = newClient(t, resp.Options{Addr: silent.Addr().String(), Password: "x", DialTimeout: 200 * time.Millisecond})
	start = time.Now()
	if _, err := do(context.Background(), c, "PING"); !errors.Is(err, resp.ErrConn) {
		t.Errorf("PING through a silent handshake = %v, want ErrConn", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the handshake timed out after %v, want about 200ms", d)
	}
}

// TestClose fails batches in flight and refuses new ones.
func TestClose(t *testing.T) {
	p := newProxy(t, redistest.Addr(t))
	c := resp.New(resp.Options{Addr: p.addr()})
	ctx := context.Background()
	if _, err := do(ctx, c, "PING"); err != nil {
		t.Fatal(err)
	}
	p.mode.Store(proxySilent)
	errc := make(chan error, 1)
	go func() {
		_, err := do(ctx, c, "PING")
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, resp.ErrClosed) {
			t.Errorf("PING in flight at Close = %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close left a batch waiting")
	}
	if _, err := do(ctx, c, "PING"); !errors.Is(err, resp.ErrClosed) {
		t.Errorf("PING after Close = %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestServerKillsConnections: connections killed by the server under load
// fail only the batches on them; the client redials and goes on.
func TestServerKillsConnections(t *testing.T) {
	addr := redistest.Addr(t)
	c := newClient(t, resp.Options{Addr: addr, Conns: 2})
	admin := newClient(t, resp.Options{Addr: addr, Conns: 1})
	ctx := context.Background()
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := do(ctx, c, "PING"); err != nil {
					if !errors.Is(err, resp.ErrConn) {
						t.Errorf("PING = %v, want success or ErrConn", err)
						return
					}
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	for range 5 {
		time.Sleep(30 * time.Millisecond)
		// Kill every normal connection but the admin's own.
		if _, err := do(ctx, admin, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(30 * time.Millisecond)
	close(stop)
	wg.Wait()
	before := ok.Load()
	if _, err := do(ctx, c, "PING"); err != nil {
		t.Errorf("PING after the kills = %v", err)
	}
	t.Logf("%d PINGs answered, %d failed with their connection", before, failed.Load())
	if before == 0 {
		t.Error("no PING succeeded")
	}
}
