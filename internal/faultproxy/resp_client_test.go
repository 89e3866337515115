package faultproxy_test

import (
	"errors"
	"testing"

	fp "github.com/fastlimit/fastlimit/internal/faultproxy"
	"github.com/fastlimit/fastlimit/internal/redistest"
	"github.com/fastlimit/fastlimit/pkg/resp"
)

// TestRespClient: the project's own client (pkg/resp, RedisMux's) works
// through the proxy, handshake included, and sees a drop mid-reply as a
// failed connection, after which it dials again.
func TestRespClient(t *testing.T) {
	addr := redistest.Addr(t)
	p := fp.New(t, addr)
	c := resp.New(resp.Options{Addr: p.Addr(), DB: 1, Conns: 1, DialTimeout: ioTimeout, ReadTimeout: ioTimeout})
	t.Cleanup(func() { _ = c.Close() })
	k := key(t)
	incr := func() (int64, error) {
		b := c.Batch()
		defer c.Release(b)
		b.Command(2)
		b.String("INCR")
		b.String(k)
		if err := c.Do(ctx(t), b); err != nil {
			return 0, err
		}
		r := b.Reply(0)
		return r.Int, r.Err()
	}
	if n, err := incr(); err != nil || n != 1 {
		t.Fatalf("INCR = %d, %v; want 1", n, err)
	}
	p.Add(&fp.DropMidReply{Match: fp.Nth(1, "INCR"), After: 1})
	if _, err := incr(); !errors.Is(err, resp.ErrConn) {
		t.Fatalf("INCR with its reply cut = %v, want ErrConn", err)
	}
	if n, err := incr(); err != nil || n != 3 {
		t.Fatalf("INCR after the drop = %d, %v; want 3 (the cut one ran)", n, err)
	}
	s := p.Stats()
	if s.Accepted != 2 || s.Commands["SELECT"] != 2 || s.Commands["INCR"] != 3 {
		t.Errorf("stats %+v: want 2 connections, each with SELECT, and 3 INCR", s)
	}
}
