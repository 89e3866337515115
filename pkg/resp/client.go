// Package resp is a small Redis client for one server: commands go out in
// batches over a few long-lived connections that many goroutines share,
// pipelined, and a command is never sent twice.
//
// It exists for the rate limiter's hot path, where a general client's
// per-command objects, argument boxing and retry logic cost more than the
// decision itself: a Batch is encoded straight into a reusable buffer,
// concurrent batches bound for one connection leave in one write, and one
// reader goroutine per connection matches replies to batches in order.
//
// When a connection fails, every batch in flight on it fails with an error
// wrapping ErrConn, whether or not Redis ran its commands; the next batch
// dials again. Nothing is retried. A batch whose caller gives up before it
// is written is never written, and fails with an error wrapping ErrNotSent.
// Connections are dialled in the background, so that a handshake slower
// than callers' deadlines still completes for the callers that follow.
package resp

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrConn marks a batch that failed because its connection did: it may
	// or may not have run.
	ErrConn = errors.New("redis connection failed")
	// ErrClosed is returned by Do after Close.
	ErrClosed = errors.New("redis client closed")
	// ErrBatch is returned by Do for a malformed batch, which is not sent.
	ErrBatch = errors.New("malformed batch")
	// ErrNotSent marks a batch that was never written, so none of its
	// commands ran: its caller gave up first, or too much already waited
	// to be written, or its connection failed before its turn.
	ErrNotSent = errors.New("not sent")
)

// Options configure a Client.
type Options struct {
	// Network is "tcp" (the default when empty) or "unix", for which Addr
	// is the socket's path.
	Network string
	// Addr is the server's host:port, or a socket's path.
	Addr string
	// ClientName, when set, names the connections with CLIENT SETNAME.
	ClientName string
	// Username and Password authenticate with AUTH when Password is set.
	Username, Password string
	// DB is selected with SELECT when not 0.
	DB int
	// TLS, when set, wraps connections in TLS with this configuration.
	TLS *tls.Config
	// Conns is how many connections batches share (default 2).
	Conns int
	// DialTimeout bounds connecting, TLS and the AUTH/SELECT handshake
	// (default 1s); a Do's context bounds it too.
	DialTimeout time.Duration
	// WriteTimeout bounds each write (default: none beyond the connection's
	// failure).
	WriteTimeout time.Duration
	// ReadTimeout is how long the oldest batch on a connection may wait for
	// its replies before the connection is declared dead and closed,
	// failing every batch on it (default 3s). A Do's context bounds each
	// caller's own wait, whatever this says.
	ReadTimeout time.Duration
	// MaxPending caps the bytes of batches waiting to be written on one
	// connection (default 4 MiB): past it, Do fails at once with ErrNotSent.
	MaxPending int
	// Dialer dials Network; nil means a net.Dialer. Tests inject proxies here.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Client sends batches to one Redis server. It is safe for concurrent use.
// New does no I/O; connections are dialled by the first Do on each (or by
// Connect), and again by the next Do after one fails.
type Client struct {
	opts  Options
	conns []*conn
	next  atomic.Uint32
	pool  sync.Pool

	closed   atomic.Bool
	stop     chan struct{}
	watchdog sync.Once
	wg       sync.WaitGroup
}

// New returns a Client for opts.
func New(opts Options) *Client {
	if opts.Conns <= 0 {
		opts.Conns = 2
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = time.Second
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 3 * time.Second
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 4 << 20
	}
	if opts.Network == "" {
		opts.Network = "tcp"
	}
	if opts.Dialer == nil {
		var d net.Dialer
		opts.Dialer = d.DialContext
	}
	c := &Client{opts: opts, stop: make(chan struct{})}
	c.pool.New = func() any { return newBatch() }
	c.conns = make([]*conn, opts.Conns)
	for i := range c.conns {
		c.conns[i] = &conn{client: c}
	}
	return c
}

// Addr returns the server's address.
func (c *Client) Addr() string { return c.opts.Addr }

// Batch returns an empty batch, from a pool.
func (c *Client) Batch() *Batch {
	b := c.pool.Get().(*Batch)
	b.reset()
	return b
}

// Release gives b back to the pool. A batch whose Do failed may still be
// on a connection; Release leaves it to the garbage collector.
func (c *Client) Release(b *Batch) {
	if b.busy {
		return
	}
	if cap(b.buf) > 64<<10 || cap(b.replies) > 4096 {
		return // do not keep outsized buffers
	}
	c.pool.Put(b)
}

// Do sends b's commands and waits for their replies, or for ctx to end. It
// returns nil when every command has its reply (which may be an error
// reply: see Reply.Err); an error wrapping ErrNotSent when none of them was
// written (ctx ended first, or the connection failed before b's turn); an
// error wrapping ErrConn when the connection failed after b was written;
// or ctx's error once b was written, in which case the commands may still
// run. The commands of one batch go out together, in order, on one
// connection.
func (c *Client) Do(ctx context.Context, b *Batch) error {
	if b.args != 0 || b.cmds == 0 {
		return fmt.Errorf("%w: %d commands, %d arguments missing", ErrBatch, b.cmds, b.args)
	}
	if c.closed.Load() {
		return ErrClosed
	}
	b.prepare()
	cn := c.conns[int(c.next.Add(1))%len(c.conns)]
	b.cn = cn
	if err := cn.send(ctx, b); err != nil {
		return err
	}
	select {
	case <-b.done:
		if b.err != nil {
			// The reader may still be writing into b: leave it unpooled.
			return b.err
		}
		b.busy = false
		return nil
	case <-ctx.Done():
		if b.state.CompareAndSwap(batchPending, batchDropped) {
			return fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
		}
		return ctx.Err()
	}
}

// Discard closes the connection that carried b, failing every other batch
// on it, if it is still up: call it when b's replies show that the
// connection's replies no longer match its commands (a script's reply
// without the tag it was sent with). b must be a batch whose Do returned
// nil, not yet released.
func (c *Client) Discard(b *Batch, err error) {
	cn, nc := b.cn, b.nc
	if cn == nil || nc == nil {
		return
	}
	cn.mu.Lock()
	cn.failLocked(nc, fmt.Errorf("%w: %w", ErrConn, err))
	cn.mu.Unlock()
}

// Connect dials every connection that is not up, and returns the first
// error.
func (c *Client) Connect(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	for _, cn := range c.conns {
		cn.mu.Lock()
		_, err := cn.connectLocked(ctx)
		cn.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// Up reports how many connections are up.
func (c *Client) Up() int {
	n := 0
	for _, cn := range c.conns {
		cn.mu.Lock()
		if cn.nc != nil {
			n++
		}
		cn.mu.Unlock()
	}
	return n
}

// Close closes every connection, failing the batches on them, and stops
// the client's goroutines. It is idempotent.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	close(c.stop)
	for _, cn := range c.conns {
		cn.mu.Lock()
		cn.failLocked(cn.nc, ErrClosed)
		cn.mu.Unlock()
	}
	c.wg.Wait()
	return nil
}

// startWatchdog starts, once, the goroutine that closes connections whose
// oldest batch has waited longer than ReadTimeout.
func (c *Client) startWatchdog() {
	c.watchdog.Do(func() {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			every := min(c.opts.ReadTimeout/4, 250*time.Millisecond)
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-c.stop:
					return
				case now := <-t.C:
					for _, cn := range c.conns {
						cn.expire(now)
					}
				}
			}
		}()
	})
}

// dial connects to the server and runs the handshake.
func (c *Client) dial(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	nc, err := c.opts.Dialer(ctx, c.opts.Network, c.opts.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: dial %s: %w", ErrConn, c.opts.Addr, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(deadline)
	}
	if c.opts.TLS != nil {
		tc := tls.Client(nc, c.opts.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, nil, fmt.Errorf("%w: TLS handshake with %s: %w", ErrConn, c.opts.Addr, err)
		}
		nc = tc
	}
	br := bufio.NewReaderSize(nc, 32<<10)
	if err := c.handshake(nc, br); err != nil {
		_ = nc.Close()
		return nil, nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, br, nil
}

// handshake authenticates and selects the database, synchronously.
func (c *Client) handshake(nc net.Conn, br *bufio.Reader) error {
	b := newBatch()
	if c.opts.Password != "" {
		if c.opts.Username != "" {
			b.Command(3)
			b.String("AUTH")
			b.String(c.opts.Username)
		} else {
			b.Command(2)
			b.String("AUTH")
		}
		b.String(c.opts.Password)
	}
	if c.opts.DB != 0 {
		b.Command(2)
		b.String("SELECT")
		b.Int(int64(c.opts.DB))
	}
	if c.opts.ClientName != "" {
		b.Command(3)
		b.String("CLIENT")
		b.String("SETNAME")
		b.String(c.opts.ClientName)
	}
	if b.cmds == 0 {
		return nil
	}
	b.prepare()
	if _, err := nc.Write(b.buf); err != nil {
		return fmt.Errorf("%w: handshake with %s: %w", ErrConn, c.opts.Addr, err)
	}
	for i := range b.replies {
		r := &b.replies[i]
		if err := readReply(br, r); err != nil {
			return fmt.Errorf("%w: handshake with %s: %w", ErrConn, c.opts.Addr, err)
		}
		if err := r.Err(); err != nil {
			// Redis' message never quotes the password.
			return fmt.Errorf("%w: handshake with %s: %w", ErrConn, c.opts.Addr, err)
		}
	}
	return nil
}

// Conns returns the number of connections batches share.
func (c *Client) Conns() int { return len(c.conns) }

// Options returns the client's options, defaults filled in.
func (c *Client) Options() Options { return c.opts }
