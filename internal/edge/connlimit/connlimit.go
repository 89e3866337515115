// Package connlimit caps the connections a listener holds open, so that a
// flood of connections cannot use up the process's file descriptors.
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener that holds at most Max connections open.
// Accept takes every connection the kernel has, so that the backlog never
// fills: a connection beyond the cap is closed at once (with a TCP reset,
// so that it leaves no socket behind in TIME_WAIT) and counted, and Accept
// goes on to the next. Accept therefore never waits for room: the
// goroutine serving the listener is never held, and other listeners of
// the process, whose descriptors the cap leaves free, keep answering.
//
// A connection counts from Accept until its Close is called (servers
// close every connection they were handed; the wrapped connection is not
// exposed, so that nothing closes it behind the count's back). It is safe
// for concurrent use.
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

// Accept returns the next connection that fits under the cap, closing the
// ones that do not. It returns the error of the wrapped Accept.
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

// Stats returns the listener's gauges and counters; it is cheap.
func (l *Listener) Stats() Stats {
	return Stats{Max: l.max, Open: l.open.Load(), Accepted: l.accepted.Load(), Refused: l.refused.Load()}
}

// refuse closes c at once; a TCP connection is reset rather than shut
// down, so that its socket is freed now.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// conn is an accepted connection; its first Close frees its place.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
