package faultproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one client connection and its upstream connection. Three
// goroutines serve it: readRequests (client -> upstream, deciding the
// faults), readUpstream (parses replies) and writeReplies (pairs replies
// with commands in order, applies faults, writes to the client).
type conn struct {
	p          *Proxy
	id         int64
	clientAddr string
	opened     time.Time
	raw        net.Conn // the client's TCP connection
	client     net.Conn // raw, or TLS over it
	handshake  []*Rule  // SlowHandshake rules that took this connection
	ncmd       atomic.Int64

	mu       sync.Mutex
	upstream net.Conn
	closed   bool
	done     chan struct{}

	pendMu  sync.Mutex
	pending []*entry      // commands awaiting their reply, in order
	pendSig chan struct{} // a nudge when pending gets an entry

	replies  chan upReply
	unpaired atomic.Bool // RESP2 pub/sub or MONITOR: replies no longer pair
	resp3    atomic.Bool
}

// entry is a command awaiting its reply, with the faults decided for it.
type entry struct {
	cmd  *Command
	at   time.Time // when the proxy read it
	fake []byte    // ErrorReply: the reply, sent without asking upstream
	drop bool      // DropRequest: close when its turn comes
	lose bool      // DropAndLose: swallow the reply, close
	acts []*Rule   // reply faults
}

// local reports whether e is answered without an upstream reply.
func (e *entry) local() bool { return e.fake != nil || e.drop }

type upReply struct {
	raw  []byte
	at   time.Time
	push bool
}

// connIDs numbers connections across every proxy of the process, so that
// a Set's rules tell its proxies' connections apart.
var connIDs atomic.Int64

func (p *Proxy) newConn(nc net.Conn) *conn {
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		reset(nc)
		return nil
	default:
	}
	c := &conn{
		p:          p,
		id:         connIDs.Add(1),
		clientAddr: nc.RemoteAddr().String(),
		opened:     time.Now(),
		raw:        nc,
		client:     nc,
		done:       make(chan struct{}),
		pendSig:    make(chan struct{}, 1),
		replies:    make(chan upReply, 256),
	}
	p.conns[c.id] = c
	p.mu.Unlock()
	if p.o.TLS != nil {
		c.client = tls.Server(nc, p.o.TLS)
	}
	for _, r := range p.ruleList() {
		r.claim(c.id)
	}
	for _, r := range p.ruleList() {
		if _, ok := r.fault.(*SlowHandshake); ok && c.take(r, nil, true) {
			c.handshake = append(c.handshake, r)
		}
	}
	return c
}

// take decides whether rule r applies to cmd on c, and counts it.
func (c *conn) take(r *Rule, cmd *Command, connLevel bool) bool {
	var ok bool
	if connLevel {
		ok = r.takeConn(c.id)
	} else {
		ok = r.take(c.id, cmd)
	}
	if ok {
		c.p.countFault(r.fault)
	}
	return ok
}

// close ends the connection, once: a reset closes the client side with a
// TCP reset.
func (c *conn) close(rst bool, reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	up := c.upstream
	c.mu.Unlock()
	close(c.done)
	if reason != "" {
		c.p.logf("connection %d from %s closed: %s", c.id, c.clientAddr, reason)
	}
	if rst {
		reset(c.raw)
	} else {
		_ = c.raw.Close()
	}
	if up != nil {
		_ = up.Close()
	}
	c.p.mu.Lock()
	delete(c.p.conns, c.id)
	c.p.mu.Unlock()
}

func (c *conn) run() {
	defer c.close(false, "")
	var delay time.Duration
	for _, r := range c.handshake {
		delay = max(delay, r.fault.(*SlowHandshake).AcceptDelay)
	}
	if delay > 0 && !c.sleep(delay, nil) {
		return
	}
	up, err := c.dial()
	if err != nil {
		c.close(true, "dial upstream: "+err.Error())
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = up.Close()
		return
	}
	c.upstream = up
	c.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.readUpstream(up)
	}()
	go func() {
		defer wg.Done()
		c.writeReplies()
	}()
	c.readRequests(up)
	wg.Wait()
}

func (c *conn) dial() (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.p.o.DialTimeout)
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if c.p.o.UpstreamTLS != nil {
		d := tls.Dialer{Config: c.p.o.UpstreamTLS}
		return d.DialContext(ctx, "tcp", c.p.o.Upstream)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", c.p.o.Upstream)
}

// sleep waits d, or until released is closed (nil: never), and reports
// false if the connection closed first.
func (c *conn) sleep(d time.Duration, released <-chan struct{}) bool {
	if d <= 0 {
		return c.isOpen()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-released:
		return true
	case <-c.done:
		return false
	}
}

func (c *conn) isOpen() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// readRequests forwards the client's commands to up, deciding the faults
// of each.
func (c *conn) readRequests(up net.Conn) {
	r := bufio.NewReaderSize(c.client, 32<<10)
	w := bufio.NewWriterSize(up, 32<<10)
	for {
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				c.close(false, "")
				return
			}
		}
		raw, cmd, err := readCommand(r, c.p.o.MaxValue)
		if err != nil {
			reason := ""
			if errors.Is(err, ErrMalformed) {
				reason = "request: " + err.Error()
			}
			c.close(false, reason)
			return
		}
		if cmd == nil { // Redis ignores it and does not answer
			_, _ = w.Write(raw)
			continue
		}
		cmd.Conn, cmd.Index = c.id, int(c.ncmd.Add(1))
		e := &entry{cmd: cmd, at: time.Now()}
		if !c.decide(e, w) {
			return
		}
		switch {
		case e.drop:
			_ = w.Flush()
			c.p.dropped.Add(1)
			c.push(e)
			<-c.done
			return
		case e.fake != nil:
			c.p.faked.Add(1)
			c.push(e)
			continue
		case isSubscribe(cmd):
			// Its replies, and the messages after it, answer no
			// command: in RESP3 they are pushes; in RESP2 the
			// connection stops pairing replies with commands.
			if !c.resp3.Load() {
				c.unpaired.Store(true)
			}
		case c.unpaired.Load():
			// Nothing pairs on this connection any more.
		default:
			c.push(e)
		}
		_, _ = w.Write(raw)
		c.p.countForward(cmd.Name)
		if e.lose {
			_ = w.Flush()
			<-c.done
			return
		}
	}
}

// decide applies the request-side faults to e and collects its reply
// faults. It reports false if the connection closed while a Freeze held
// the command.
func (c *conn) decide(e *entry, w *bufio.Writer) bool {
	for _, r := range c.p.ruleList() {
		switch f := r.fault.(type) {
		case *SlowHandshake:
			continue
		case *ErrorReply:
			if !e.local() && c.take(r, e.cmd, false) {
				e.fake = Error(f.Err).Bytes()
			}
		case *DropRequest:
			if !e.local() && c.take(r, e.cmd, false) {
				e.fake, e.drop = nil, true
			}
		case *DropAndLose:
			if !e.local() && c.take(r, e.cmd, false) {
				e.lose = true
			}
		case *Freeze:
			if !c.take(r, e.cmd, false) {
				continue
			}
			if !f.Requests {
				e.acts = append(e.acts, r)
				continue
			}
			// A stalled Redis: nothing after this command reaches it
			// either.
			if err := w.Flush(); err != nil {
				c.close(false, "")
				return false
			}
			select {
			case <-r.released:
			case <-c.done:
				return false
			}
		default:
			if c.take(r, e.cmd, false) {
				e.acts = append(e.acts, r)
			}
		}
	}
	for _, r := range c.handshake {
		hs := r.fault.(*SlowHandshake)
		m := Match{Commands: hs.Match.Commands, Func: hs.Func}
		if e.cmd.Index <= hs.First && m.matchCommand(e.cmd) {
			e.acts = append(e.acts, r)
		}
	}
	return true
}

func isSubscribe(cmd *Command) bool {
	switch cmd.Name {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE", "MONITOR":
		return true
	}
	return false
}

func (c *conn) push(e *entry) {
	c.pendMu.Lock()
	c.pending = append(c.pending, e)
	c.pendMu.Unlock()
	select {
	case c.pendSig <- struct{}{}:
	default:
	}
}

// popLocal pops the head entry if it is answered without upstream.
func (c *conn) popLocal() *entry {
	c.pendMu.Lock()
	defer c.pendMu.Unlock()
	if len(c.pending) == 0 || !c.pending[0].local() {
		return nil
	}
	return c.popLocked()
}

func (c *conn) pop() *entry {
	c.pendMu.Lock()
	defer c.pendMu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	return c.popLocked()
}

func (c *conn) popLocked() *entry {
	e := c.pending[0]
	c.pending[0] = nil
	c.pending = c.pending[1:]
	return e
}
