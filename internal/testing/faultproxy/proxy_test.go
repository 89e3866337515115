package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	fp "github.com/fastlimit/fastlimit/internal/testing/faultproxy"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// TestForward: without faults the proxy is transparent, over RESP2 and
// RESP3, and counts what it forwards.
func TestForward(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run("RESP"+strconv.Itoa(proto), func(t *testing.T) {
			addr := redistest.Addr(t)
			p := fp.New(t, addr)
			c := viaProxy(t, p.Addr(), func(o *redis.Options) { o.Protocol = proto })
			k, h := key(t), key(t)
			if err := c.Incr(ctx(t), k).Err(); err != nil {
				t.Fatal(err)
			}
			pipe := c.Pipeline()
			for range 50 {
				pipe.Incr(ctx(t), k)
			}
			pipe.HSet(ctx(t), h, "a", "1", "b", "2")
			cmds, err := pipe.Exec(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if n := cmds[49].(*redis.IntCmd).Val(); n != 51 {
				t.Errorf("last INCR = %d, want 51", n)
			}
			all, err := c.HGetAll(ctx(t), h).Result()
			if err != nil || len(all) != 2 || all["a"] != "1" || all["b"] != "2" {
				t.Errorf("HGETALL = %v, %v", all, err)
			}
			if got := counter(t, direct(t, addr), k); got != 51 {
				t.Errorf("Redis has %d, want 51", got)
			}
			s := p.Stats()
			if s.Accepted != 1 || s.Commands["INCR"] != 51 || s.Commands["HGETALL"] != 1 {
				t.Errorf("stats %+v: want 1 connection, 51 INCR, 1 HGETALL", s)
			}
			if s.Replies != s.Forwarded || s.Unpaired != 0 || len(s.Faults) != 0 {
				t.Errorf("stats %+v: want a reply for each command, nothing else", s)
			}
		})
	}
}

// TestDropMidReply: the client's connection ends inside the reply to a
// command Redis ran.
func TestDropMidReply(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run("reset="+strconv.FormatBool(reset), func(t *testing.T) {
			addr := redistest.Addr(t)
			p := fp.New(t, addr)
			rule := p.Add(&fp.DropMidReply{Match: fp.Nth(2, "INCR"), After: 2, Reset: reset})
			k := key(t)
			c := dialRaw(t, p.Addr())
			wantValue(t, c.do("INCR", k), fp.Int(1))
			c.send(cmd("INCR", k))
			v, err := c.read()
			if err == nil {
				t.Fatalf("second INCR answered %v, want the connection to end mid-reply", v)
			}
			if !reset && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("read = %v, want an unexpected EOF (2 bytes of \":2\\r\\n\", then EOF)", err)
			}
			if got := counter(t, direct(t, addr), k); got != 2 {
				t.Errorf("Redis has %d, want 2: the INCR whose reply was cut ran", got)
			}
			<-rule.Done()
			if rule.Applied() != 1 || p.Stats().Faults["DropMidReply"] != 1 {
				t.Errorf("applied %d, stats %v; want 1", rule.Applied(), p.Stats().Faults)
			}
		})
	}
	t.Run("go-redis", func(t *testing.T) {
		addr := redistest.Addr(t)
		p := fp.New(t, addr)
		p.Add(&fp.DropMidReply{Match: fp.Nth(1, "EVAL"), After: 7})
		c := viaProxy(t, p.Addr())
		k := key(t)
		err := c.Eval(ctx(t), "return {redis.call('INCR', KEYS[1]), 7}", []string{k}).Err()
		if err == nil {
			t.Fatal("EVAL succeeded, want an error")
		}
		t.Logf("go-redis: %v", err)
		if got := counter(t, direct(t, addr), k); got != 1 {
			t.Errorf("Redis has %d, want 1", got)
		}
		// The pool replaces the broken connection.
		if err := c.Ping(ctx(t)).Err(); err != nil {
			t.Errorf("PING after the drop: %v", err)
		}
		if n := p.Stats().Accepted; n != 2 {
			t.Errorf("accepted %d connections, want 2", n)
		}
	})
}

// TestDropAndLose: a command that ran but whose reply is lost, and its
// twin that never reached Redis. Replies before it are delivered.
func TestDropAndLose(t *testing.T) {
	for _, tc := range []struct {
		fault fp.Fault
		ran   int64
	}{
		{&fp.DropAndLose{Match: fp.Nth(1, "INCR")}, 1},
		{&fp.DropRequest{Match: fp.Nth(1, "INCR")}, 0},
	} {
		t.Run(tc.fault.Name(), func(t *testing.T) {
			addr := redistest.Addr(t)
			p := fp.New(t, addr)
			p.Add(tc.fault)
			k := key(t)
			c := dialRaw(t, p.Addr())
			c.send(cmd("PING"), cmd("INCR", k), cmd("INCR", k))
			wantValue(t, c.mustRead(), fp.Simple("PONG"))
			if v, err := c.read(); !errors.Is(err, io.EOF) {
				t.Fatalf("read after PONG = %v, %v; want EOF with no byte of a reply", v, err)
			}
			if got := counter(t, direct(t, addr), k); got != tc.ran {
				t.Errorf("Redis has %d, want %d", got, tc.ran)
			}
			s := p.Stats()
			if s.Commands["INCR"] != tc.ran || s.Dropped != 1-tc.ran {
				t.Errorf("stats %+v: want %d INCR forwarded, %d dropped", s, tc.ran, 1-tc.ran)
			}
		})
	}
}

// TestExtraReply: one unsolicited reply shifts every later reply by one.
func TestExtraReply(t *testing.T) {
	addr := redistest.Addr(t)
	a, b := key(t), key(t)
	rdb := direct(t, addr)
	if err := rdb.MSet(ctx(t), a, "A", b, "B").Err(); err != nil {
		t.Fatal(err)
	}
	t.Run("before", func(t *testing.T) {
		p := fp.New(t, addr)
		p.Add(&fp.ExtraReply{Match: fp.Nth(1, "GET"), Reply: fp.Error("ERR injected"), Before: true})
		c := dialRaw(t, p.Addr())
		wantValue(t, c.do("GET", a), fp.Error("ERR injected"))
		wantValue(t, c.do("GET", b), fp.Bulk("A"))
		c.send(cmd("PING"))
		wantValue(t, c.mustRead(), fp.Bulk("B"))
		wantValue(t, c.mustRead(), fp.Simple("PONG"))
	})
	t.Run("after, shaped like a script's reply", func(t *testing.T) {
		p := fp.New(t, addr)
		p.Add(&fp.ExtraReply{Match: fp.Nth(1, "GET"), Reply: fp.Ints(1, 0, 42)})
		c := dialRaw(t, p.Addr())
		wantValue(t, c.do("GET", a), fp.Bulk("A"))
		wantValue(t, c.do("GET", b), fp.Ints(1, 0, 42))
		wantValue(t, c.mustRead(), fp.Bulk("B"))
		if s := p.Stats(); s.Unpaired != 1 || s.Replies != 3 {
			t.Errorf("stats %+v: want 3 replies, 1 unpaired", s)
		}
	})
	t.Run("go-redis", func(t *testing.T) {
		// go-redis (v9.23) takes the extra error as GET a's answer, then
		// finds GET a's real reply unread when the connection returns
		// to its pool, and closes it: GET b runs on a new connection.
		p := fp.New(t, addr)
		p.Add(&fp.ExtraReply{Match: fp.Nth(1, "GET"), Reply: fp.Error("ERR injected"), Before: true})
		c := viaProxy(t, p.Addr())
		if err := c.Get(ctx(t), a).Err(); err == nil || err.Error() != "ERR injected" {
			t.Fatalf("GET a = %v, want the injected error", err)
		}
		got, err := c.Get(ctx(t), b).Result()
		if err != nil || got != "B" {
			t.Fatalf("GET b = %q, %v; want %q", got, err, "B")
		}
		if n := p.Stats().Accepted; n != 2 {
			t.Errorf("%d connections, want 2: go-redis should have dropped the first", n)
		}
	})
	t.Run("raw bytes", func(t *testing.T) {
		p := fp.New(t, addr)
		p.Add(&fp.ExtraReply{Match: fp.Nth(1, "GET"), Raw: []byte("?not RESP\r\n"), Before: true})
		c := dialRaw(t, p.Addr())
		c.send(cmd("GET", a))
		if v, err := c.read(); !errors.Is(err, fp.ErrMalformed) {
			t.Fatalf("read = %v, %v; want the injected bytes, which are not RESP", v, err)
		}
	})
}

// TestHoldReplies: late replies, and replies or commands frozen until
// released.
func TestHoldReplies(t *testing.T) {
	addr := redistest.Addr(t)
	rdb := direct(t, addr)
	t.Run("delay", func(t *testing.T) {
		p := fp.New(t, addr)
		c := viaProxy(t, p.Addr())
		if err := c.Ping(ctx(t)).Err(); err != nil { // the handshake, unheld
			t.Fatal(err)
		}
		const delay = 300 * time.Millisecond
		rule := p.Add(&fp.HoldReplies{Match: fp.Match{Commands: []string{"GET"}}, Delay: delay})
		start := time.Now()
		if err := c.Get(ctx(t), key(t)).Err(); !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		if d := time.Since(start); d < delay {
			t.Errorf("GET answered in %v, want at least %v", d, delay)
		}
		if err := c.Ping(ctx(t)).Err(); err != nil {
			t.Fatal(err)
		}
		if n := rule.Applied(); n != 1 {
			t.Errorf("held %d replies, want 1 (PING is not held)", n)
		}
	})
	t.Run("freeze replies", func(t *testing.T) {
		p := fp.New(t, addr)
		rule := p.Add(&fp.Freeze{})
		k := key(t)
		c := dialRaw(t, p.Addr())
		c.send(cmd("INCR", k))
		got := c.readAsync()
		// Redis ran it, and the proxy holds its reply.
		wait.For(t, ioTimeout, func() bool { return counter(t, rdb, k) == 1 && p.Stats().Holding == 1 })
		select {
		case r := <-got:
			t.Fatalf("frozen reply delivered: %v, %v", r.v, r.err)
		default:
		}
		rule.Release()
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		wantValue(t, r.v, fp.Int(1))
		if n := p.Stats().Holding; n != 0 {
			t.Errorf("Holding = %d after the release, want 0", n)
		}
	})
	t.Run("freeze requests", func(t *testing.T) {
		p := fp.New(t, addr)
		rule := p.Add(&fp.Freeze{Requests: true})
		k := key(t)
		c := dialRaw(t, p.Addr())
		c.send(cmd("INCR", k), cmd("INCR", k))
		got := c.readAsync()
		wait.For(t, ioTimeout, func() bool { return rule.Applied() == 1 })
		if n := counter(t, rdb, k); n != 0 {
			t.Fatalf("Redis ran a frozen command: %d", n)
		}
		rule.Release()
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		wantValue(t, r.v, fp.Int(1))
		wantValue(t, c.mustRead(), fp.Int(2))
	})
}

// TestSlowHandshake: SELECT answers late on each new connection, and a
// new connection waits before the proxy dials Redis.
func TestSlowHandshake(t *testing.T) {
	addr := redistest.Addr(t)
	const delay = 300 * time.Millisecond
	t.Run("SELECT", func(t *testing.T) {
		p := fp.New(t, addr)
		rule := p.Add(&fp.SlowHandshake{Match: fp.Match{Commands: []string{"SELECT"}}, First: 10, Delay: delay})
		c := viaProxy(t, p.Addr(), func(o *redis.Options) { o.DB = 1 })
		start := time.Now()
		if err := c.Ping(ctx(t)).Err(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < delay {
			t.Errorf("first PING on db 1 answered in %v, want at least %v", d, delay)
		}
		if err := c.Ping(ctx(t)).Err(); err != nil {
			t.Fatal(err)
		}
		if n := p.Forwarded("select"); n != 1 {
			t.Errorf("SELECT forwarded %d times, want 1", n)
		}
		if n := rule.Applied(); n != 1 {
			t.Errorf("applied to %d connections, want 1", n)
		}
	})
	t.Run("accept", func(t *testing.T) {
		p := fp.New(t, addr)
		p.Add(&fp.SlowHandshake{AcceptDelay: delay})
		start := time.Now()
		wantValue(t, dialRaw(t, p.Addr()).do("PING"), fp.Simple("PONG"))
		if d := time.Since(start); d < delay {
			t.Errorf("first PING answered in %v, want at least %v", d, delay)
		}
	})
}

// TestSplitReplies: replies in pieces of 1 to 3 bytes still parse.
func TestSplitReplies(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run("RESP"+strconv.Itoa(proto), func(t *testing.T) {
			addr := redistest.Addr(t)
			p := fp.New(t, addr)
			rule := p.Add(&fp.SplitReplies{MaxChunk: 3, Gap: 50 * time.Microsecond, Seed: uint64(proto)})
			c := viaProxy(t, p.Addr(), func(o *redis.Options) { o.Protocol = proto })
			k, h, n := key(t), key(t), key(t)
			big := strings.Repeat("0123456789", 30)
			if err := c.Set(ctx(t), k, big, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if got, err := c.Get(ctx(t), k).Result(); err != nil || got != big {
				t.Fatalf("GET = %d bytes, %v; want %d bytes", len(got), err, len(big))
			}
			if err := c.HSet(ctx(t), h, "x", "1", "y", "2").Err(); err != nil {
				t.Fatal(err)
			}
			if m, err := c.HGetAll(ctx(t), h).Result(); err != nil || m["x"] != "1" || m["y"] != "2" {
				t.Fatalf("HGETALL = %v, %v", m, err)
			}
			pipe := c.Pipeline()
			for range 20 {
				pipe.Incr(ctx(t), n)
			}
			cmds, err := pipe.Exec(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			for i, cmd := range cmds {
				if v := cmd.(*redis.IntCmd).Val(); v != int64(i+1) {
					t.Fatalf("INCR %d = %d", i+1, v)
				}
			}
			if rule.Applied() < 25 {
				t.Errorf("split %d replies, want at least 25", rule.Applied())
			}
		})
	}
}

// TestErrorReply: Redis's error replies, faked; Redis never sees the
// commands they answer.
func TestErrorReply(t *testing.T) {
	addr := redistest.Addr(t)
	for _, msg := range []string{fp.BusyError, fp.OOMError, fp.ReadOnlyError, fp.LoadingError, fp.NoScriptError} {
		t.Run(strings.Fields(msg)[0], func(t *testing.T) {
			p := fp.New(t, addr)
			rule := p.Add(&fp.ErrorReply{Match: fp.Match{Commands: []string{"INCR"}, Times: 2}, Err: msg})
			c := viaProxy(t, p.Addr())
			k := key(t)
			for i := range 2 {
				if err := c.Incr(ctx(t), k).Err(); err == nil || err.Error() != msg {
					t.Fatalf("INCR %d = %v, want %q", i+1, err, msg)
				}
			}
			if n, err := c.Incr(ctx(t), k).Result(); err != nil || n != 1 {
				t.Fatalf("third INCR = %d, %v; want 1", n, err)
			}
			<-rule.Done()
			if got := counter(t, direct(t, addr), k); got != 1 {
				t.Errorf("Redis has %d, want 1", got)
			}
			if s := p.Stats(); s.Faked != 2 || s.Commands["INCR"] != 1 || rule.Applied() != 2 {
				t.Errorf("stats %+v, applied %d: want 2 faked, 1 INCR forwarded", s, rule.Applied())
			}
		})
	}
	t.Run("in order within a pipeline", func(t *testing.T) {
		p := fp.New(t, addr)
		p.Add(&fp.ErrorReply{Match: fp.Nth(1, "INCR"), Err: "LOADING later"})
		k, v := key(t), key(t)
		c := dialRaw(t, p.Addr())
		c.send(cmd("SET", v, "x"), cmd("INCR", k), cmd("GET", v), cmd("INCR", k))
		for _, want := range []fp.Value{fp.Simple("OK"), fp.Error("LOADING later"), fp.Bulk("x"), fp.Int(1)} {
			wantValue(t, c.mustRead(), want)
		}
	})
	t.Run("NOSCRIPT makes go-redis fall back to EVAL", func(t *testing.T) {
		p := fp.New(t, addr)
		p.Add(&fp.ErrorReply{Match: fp.Nth(1, "EVALSHA"), Err: fp.NoScriptError})
		c := viaProxy(t, p.Addr())
		s := redis.NewScript("return redis.call('INCR', KEYS[1])")
		k := key(t)
		if n, err := s.Run(ctx(t), c, []string{k}).Int64(); err != nil || n != 1 {
			t.Fatalf("script = %d, %v; want 1", n, err)
		}
		if p.Forwarded("EVALSHA") != 0 || p.Forwarded("EVAL") != 1 {
			t.Errorf("forwarded %v, want EVAL once and no EVALSHA", p.Stats().Commands)
		}
	})
}

// refusedConn dials addr and sends PING; it returns the error that ends
// the dial or the read, nil if PING is answered.
func refusedConn(t testing.TB, addr string) error {
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	_, err = fp.ReadValue(bufio.NewReader(c))
	return err
}

// TestCutAll: every connection is reset, new ones are refused for a
// while, then the proxy lets them through again.
func TestCutAll(t *testing.T) {
	addr := redistest.Addr(t)
	p := fp.New(t, addr)
	c := viaProxy(t, p.Addr())
	raw := dialRaw(t, p.Addr())
	wantValue(t, raw.do("PING"), fp.Simple("PONG"))
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	p.CutAll(time.Hour)
	if v, err := raw.read(); err == nil {
		t.Fatalf("read on a cut connection = %v", v)
	}
	for range 2 { // the pooled connection is dead; a new one is refused
		if err := c.Ping(ctx(t)).Err(); err == nil {
			t.Fatal("PING succeeded while Redis is unreachable")
		}
	}
	if s := p.Stats(); s.Refused == 0 || s.Open != 0 {
		t.Errorf("stats %+v: want refused connections, none open", s)
	}
	p.Allow()
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Allow: %v", err)
	}
	t.Run("refuse for a while", func(t *testing.T) {
		p.CutAll(200 * time.Millisecond)
		wait.For(t, ioTimeout, func() bool { return c.Ping(ctx(t)).Err() == nil })
	})
	t.Run("Refuse", func(t *testing.T) {
		p.Refuse()
		if err := c.Ping(ctx(t)).Err(); err != nil {
			t.Fatalf("existing connection broken by Refuse: %v", err)
		}
		if refusedConn(t, p.Addr()) == nil {
			t.Fatal("a new connection was served while refusing")
		}
		p.Allow()
		wantValue(t, dialRaw(t, p.Addr()).do("PING"), fp.Simple("PONG"))
	})
}
