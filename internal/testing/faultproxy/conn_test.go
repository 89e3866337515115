package faultproxy_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	fp "github.com/fastlimit/fastlimit/internal/testing/faultproxy"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// TestScopes: a fault applies to a chosen connection, the next new ones,
// the nth command, a connection's first commands, or what a Func picks.
func TestScopes(t *testing.T) {
	addr := redistest.Addr(t)
	fake := fp.Error("ERR faked")
	pong := fp.Simple("PONG")
	t.Run("Conn", func(t *testing.T) {
		p := fp.New(t, addr)
		a, b := dialRaw(t, p.Addr()), dialRaw(t, p.Addr())
		wantValue(t, a.do("PING"), pong)
		wantValue(t, b.do("PING"), pong)
		var id int64
		for _, ci := range p.Conns() {
			if ci.Client == b.c.LocalAddr().String() {
				id = ci.ID
			}
		}
		if id == 0 {
			t.Fatalf("no connection from %s in %+v", b.c.LocalAddr(), p.Conns())
		}
		p.Add(&fp.ErrorReply{Match: fp.Match{Conn: id}, Err: "ERR faked"})
		wantValue(t, a.do("PING"), pong)
		wantValue(t, b.do("PING"), fake)
	})
	t.Run("NextConns", func(t *testing.T) {
		p := fp.New(t, addr)
		old := dialRaw(t, p.Addr())
		wantValue(t, old.do("PING"), pong)
		p.Add(&fp.ErrorReply{Match: fp.Match{NextConns: 1}, Err: "ERR faked"})
		next, after := dialRaw(t, p.Addr()), dialRaw(t, p.Addr())
		wantValue(t, next.do("PING"), fake)
		wantValue(t, next.do("PING"), fake)
		wantValue(t, old.do("PING"), pong)
		wantValue(t, after.do("PING"), pong)
	})
	t.Run("Nth", func(t *testing.T) {
		p := fp.New(t, addr)
		rule := p.Add(&fp.ErrorReply{Match: fp.Nth(2, "ping"), Err: "ERR faked"})
		a, b := dialRaw(t, p.Addr()), dialRaw(t, p.Addr())
		wantValue(t, a.do("ECHO", "x"), fp.Bulk("x"))
		wantValue(t, a.do("PING"), pong)
		wantValue(t, b.do("PING"), fake) // counted across connections
		wantValue(t, a.do("PING"), pong)
		select {
		case <-rule.Done():
		default:
			t.Error("rule not done after its one application")
		}
	})
	t.Run("FirstCommands", func(t *testing.T) {
		p := fp.New(t, addr)
		p.Add(&fp.ErrorReply{Match: fp.Match{FirstCommands: 1}, Err: "ERR faked"})
		for range 2 {
			c := dialRaw(t, p.Addr())
			wantValue(t, c.do("PING"), fake)
			wantValue(t, c.do("PING"), pong)
		}
	})
	t.Run("Func and subcommand", func(t *testing.T) {
		p := fp.New(t, addr)
		p.Add(&fp.ErrorReply{Match: fp.Match{Commands: []string{"CLIENT GETNAME"}}, Err: "ERR faked"})
		p.Add(&fp.ErrorReply{Match: fp.Match{Func: func(c *fp.Command) bool {
			return c.Name == "ECHO" && len(c.Args) == 1 && c.Args[0] == "b"
		}}, Err: "ERR faked"})
		c := dialRaw(t, p.Addr())
		wantValue(t, c.do("CLIENT", "SETNAME", "x"), fp.Simple("OK"))
		wantValue(t, c.do("client", "getname"), fake)
		wantValue(t, c.do("ECHO", "a"), fp.Bulk("a"))
		wantValue(t, c.do("ECHO", "b"), fake)
	})
	t.Run("Set", func(t *testing.T) {
		// Two proxies to the same Redis under two names: a set rule
		// tells their connections apart.
		_, port, _ := net.SplitHostPort(addr)
		g := fp.NewSet(t, addr, net.JoinHostPort("localhost", port))
		ps := g.Proxies()
		g.Add(&fp.ErrorReply{Match: fp.Match{NextConns: 1}, Err: "ERR faked"})
		// The two proxies accept on goroutines of their own: b dials only
		// once a's connection is in, so that "next" is a's.
		a := dialRaw(t, ps[0].Addr())
		wantValue(t, a.do("PING"), fake)
		b := dialRaw(t, ps[1].Addr())
		wantValue(t, b.do("PING"), pong)
		g.Clear()
		id := ps[1].Conns()[0].ID
		g.Add(&fp.ErrorReply{Match: fp.Match{Conn: id}, Err: "ERR faked"})
		wantValue(t, a.do("PING"), pong)
		wantValue(t, b.do("PING"), fake)
		if s := g.Stats(); s.Accepted != 2 || s.Faked != 2 {
			t.Errorf("set stats %+v: want 2 connections, 2 faked", s)
		}
	})
	t.Run("Release and Clear", func(t *testing.T) {
		p := fp.New(t, addr)
		rule := p.Add(&fp.ErrorReply{Err: "ERR faked"})
		c := dialRaw(t, p.Addr())
		wantValue(t, c.do("PING"), fake)
		rule.Release()
		wantValue(t, c.do("PING"), pong)
		p.Add(&fp.ErrorReply{Err: "ERR faked"})
		p.Clear()
		wantValue(t, c.do("PING"), pong)
	})
}

// TestPubSub: pub/sub messages answer no command, over RESP2 and RESP3;
// the proxy passes them on and keeps pairing the other replies.
func TestPubSub(t *testing.T) {
	addr := redistest.Addr(t)
	rdb := direct(t, addr)
	ch := key(t)
	t.Run("RESP2", func(t *testing.T) {
		p := fp.New(t, addr)
		c := dialRaw(t, p.Addr())
		c.send(cmd("SUBSCRIBE", ch))
		wantValue(t, c.mustRead(), fp.Array(fp.Bulk("subscribe"), fp.Bulk(ch), fp.Int(1)))
		if err := rdb.Publish(ctx(t), ch, "hi").Err(); err != nil {
			t.Fatal(err)
		}
		wantValue(t, c.mustRead(), fp.Array(fp.Bulk("message"), fp.Bulk(ch), fp.Bulk("hi")))
		p.Add(&fp.ErrorReply{Match: fp.Nth(2, "PING"), Err: "ERR faked"})
		c.send(cmd("PING"), cmd("PING"))
		// Replies no longer pair here, so the fake goes out at once,
		// maybe before the first PING's reply.
		got := []string{c.mustRead().String(), c.mustRead().String()}
		slices.Sort(got)
		want := []string{fp.Array(fp.Bulk("pong"), fp.Bulk("")).String(), fp.Error("ERR faked").String()}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("replies %v, want %v", got, want)
		}
		if n := p.Stats().Unpaired; n != 3 {
			t.Errorf("%d unpaired replies, want 3", n)
		}
	})
	t.Run("RESP3", func(t *testing.T) {
		p := fp.New(t, addr)
		c := viaProxy(t, p.Addr())
		ps := c.Subscribe(ctx(t), ch)
		defer ps.Close()
		if _, err := ps.Receive(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Publish(ctx(t), ch, "hi").Err(); err != nil {
			t.Fatal(err)
		}
		msg, err := ps.ReceiveMessage(ctx(t))
		if err != nil || msg.Payload != "hi" {
			t.Fatalf("message %v, %v", msg, err)
		}
		if err := c.Ping(ctx(t)).Err(); err != nil {
			t.Fatal(err)
		}
		if n := p.Stats().Unpaired; n != 2 {
			t.Errorf("%d unpaired replies, want 2 (a push for SUBSCRIBE and for the message)", n)
		}
	})
}

// TestMalformed: bytes that are not RESP, in either direction, close the
// connection they came on, and only it.
func TestMalformed(t *testing.T) {
	t.Run("reply", func(t *testing.T) {
		// Not a Redis: a listener that answers any request with garbage,
		// to show what the proxy does with it.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
						_, _ = c.Write([]byte("$3\r\nabcdef\r\n"))
						_, _ = io.Copy(io.Discard, c)
					}
				}()
			}
		}()
		p := fp.New(t, ln.Addr().String())
		for range 2 {
			c := dialRaw(t, p.Addr())
			c.send(cmd("PING"))
			if v, err := c.read(); !errors.Is(err, io.EOF) {
				t.Fatalf("read = %v, %v; want EOF", v, err)
			}
		}
		wait.For(t, ioTimeout, func() bool { return p.Stats().Open == 0 })
	})
	t.Run("request", func(t *testing.T) {
		p := fp.New(t, redistest.Addr(t))
		good := dialRaw(t, p.Addr())
		bad := dialRaw(t, p.Addr())
		if _, err := bad.c.Write([]byte("*1\r\n:1\r\n")); err != nil {
			t.Fatal(err)
		}
		if v, err := bad.read(); !errors.Is(err, io.EOF) {
			t.Fatalf("read = %v, %v; want EOF", v, err)
		}
		wantValue(t, good.do("PING"), fp.Simple("PONG"))
		if n := p.Stats().Forwarded; n != 1 {
			t.Errorf("forwarded %d commands, want 1", n)
		}
	})
}

// TestClose: Close ends every goroutine, even with replies frozen,
// commands held, dials delayed and splits under way; nothing leaks.
func TestClose(t *testing.T) {
	addr := redistest.Addr(t)
	before := runtime.NumGoroutine()
	p, err := fp.Start(fp.Options{Upstream: addr})
	if err != nil {
		t.Fatal(err)
	}
	p.Add(&fp.Freeze{Match: fp.Match{Commands: []string{"INCR"}}})
	p.Add(&fp.Freeze{Match: fp.Match{Commands: []string{"DECR"}}, Requests: true})
	p.Add(&fp.SplitReplies{Match: fp.Match{Commands: []string{"ECHO"}}, Gap: time.Hour})
	var conns []*rawClient
	for _, args := range [][]string{{"INCR", key(t)}, {"DECR", key(t)}, {"ECHO", "hello"}, {"PING"}} {
		c := dialRaw(t, p.Addr())
		c.send(args)
		conns = append(conns, c)
	}
	wantValue(t, conns[3].mustRead(), fp.Simple("PONG"))
	p.Add(&fp.SlowHandshake{AcceptDelay: time.Hour})
	conns = append(conns, dialRaw(t, p.Addr()))
	wait.For(t, ioTimeout, func() bool { return p.Stats().Accepted == 5 })
	wait.For(t, ioTimeout, func() bool { return p.Stats().Faults["Freeze"] == 2 })
	closed := make(chan struct{})
	go func() {
		_ = p.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(ioTimeout):
		t.Fatal("Close hangs")
	}
	_ = p.Close() // again: no effect
	for _, c := range conns {
		if v, err := c.read(); err == nil {
			t.Errorf("read after Close = %v, want an error", v)
		}
		_ = c.c.Close()
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_ = c.Close()
		t.Error("the proxy still listens after Close")
	}
	wait.For(t, ioTimeout, func() bool { return runtime.NumGoroutine() <= before })
}

// TestTLS: the proxy terminates TLS from clients and dials a TLS Redis,
// reading the plain RESP between.
func TestTLS(t *testing.T) {
	f := certtest.NewFiles(t)
	pool := certtest.Pool(f.CA)
	port := loopback.Port(t)
	redistest.StartServer(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", f.ServerCert,
		"--tls-key-file", f.ServerKey, "--tls-ca-cert-file", f.CAFile, "--tls-auth-clients", "no")
	p := fp.NewWith(t, fp.Options{
		Upstream:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		TLS:         &tls.Config{Certificates: []tls.Certificate{f.Server}},
		UpstreamTLS: &tls.Config{RootCAs: pool},
	})
	c := viaProxy(t, p.Addr(), func(o *redis.Options) { o.TLSConfig = &tls.Config{RootCAs: pool} })
	k := key(t)
	if err := c.Set(ctx(t), k, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx(t), k).Result(); err != nil || v != "v" {
		t.Fatalf("GET = %q, %v", v, err)
	}
	if p.Forwarded("SET") != 1 || p.Forwarded("GET") != 1 {
		t.Errorf("commands %v: the proxy did not read them", p.Stats().Commands)
	}
}
