// Package connlimit caps a listener's open connections to spare file descriptors.
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener that holds at most Max connections open: one
// beyond the cap is accepted and reset at once, so Accept never waits for
// room. A connection counts until its Close. It is safe for concurrent use.
type Listener struct {
	net.Listener
	max int64

	open     atomic.Int64
	accepted atomic.Int64
	refused  atomic.Int64
}

// Stats are a Listener's gauges and counters.
type Stats struct {
	Max      int64 // the cap
	Open     int64 // connections open now
	Accepted int64 // connections handed to the server, ever
	Refused  int64 // connections closed at once because Max were open
}

// New returns l capped at n open connections; n < 1 is taken as 1.
func New(l net.Listener, n int) *Listener {
	return &Listener{Listener: l, max: int64(max(n, 1))}
}

// Accept returns the next connection under the cap, or the wrapped error.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			refuse(c)
			continue
		}
		l.accepted.Add(1)
		return &conn{Conn: c, l: l}, nil
	}
}

// Stats returns the listener's gauges and counters.
func (l *Listener) Stats() Stats {
	return Stats{Max: l.max, Open: l.open.Load(), Accepted: l.accepted.Load(), Refused: l.refused.Load()}
}

func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

type conn struct {
	net.Conn
	l    *Listener
	once sync.Once // the first Close frees the place
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
