package resp

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// conn is one connection that batches share. Senders add their batch to
// pending under mu. One write is in flight at a time: a write goes out when
// the replies to the previous one are all in, so that batches arriving
// while Redis works leave together in the next write. With nothing in
// flight, a sender writes its batch at once, adding no latency; under load,
// writes grow with the load, and Redis and the server pay one system call
// per write rather than per batch. The sender that finds the connection
// idle writes (and keeps writing what others add meanwhile); when a write's
// replies are in, the reader goroutine writes what accumulated.
//
// A batch is encoded into the write only if its caller still waits: one
// whose caller gave up while it was pending is dropped, unsent. The reader
// reads replies in order and hands them to the written batches in the
// order they were written.
//
// Dials run in the background, bounded by DialTimeout only: a caller waits
// for a dial as long as its context lets it, and a dial that outlives its
// first caller still gives the connection to the next.
type conn struct {
	client *Client

	mu       sync.Mutex
	nc       net.Conn      // nil when down
	dialing  chan struct{} // closed when the dial under way ends
	dialErr  error         // the outcome of the last dial, if it failed
	pending  []*Batch      // batches not yet written, in arrival order
	pendingN int           // their bytes
	out      []byte        // the write being built
	writing  bool          // a goroutine is writing out
	flying   bool          // a write's replies are not all in
	queue    []*Batch      // written batches awaiting replies, oldest at head
	head     int
}

// send adds b to the pending batches, dialling the connection first if it
// is down, and writes them out unless another sender is writing.
func (cn *conn) send(ctx context.Context, b *Batch) error {
	cn.mu.Lock()
	if _, err := cn.connectLocked(ctx); err != nil {
		cn.mu.Unlock()
		return err
	}
	if cn.pendingN+len(b.buf) > cn.client.opts.MaxPending && cn.pendingN > 0 {
		cn.mu.Unlock()
		return fmt.Errorf("%w: %d bytes already wait to be written to %s", ErrNotSent, cn.pendingN, cn.client.opts.Addr)
	}
	b.state.Store(batchPending)
	b.busy = true
	cn.pending = append(cn.pending, b)
	cn.pendingN += len(b.buf)
	cn.flushLocked()
	cn.mu.Unlock()
	return nil
}

// flushLocked writes the pending batches out unless a write is under way
// or awaits its replies. mu is held on entry and on return, but not while
// writing.
func (cn *conn) flushLocked() {
	if cn.writing || cn.flying {
		return
	}
	cn.writing = true
	for len(cn.pending) > 0 && cn.nc != nil && !cn.flying {
		nc := cn.nc
		out := cn.out[:0]
		n := 0
		now := time.Now()
		cn.compactLocked()
		for _, b := range cn.pending {
			if !b.state.CompareAndSwap(batchPending, batchWritten) {
				continue // its caller gave up: never sent
			}
			b.nc, b.sent = nc, now
			out = append(out, b.buf...)
			cn.queue = append(cn.queue, b)
			n++
		}
		clear(cn.pending)
		cn.pending, cn.pendingN = cn.pending[:0], 0
		if n == 0 {
			break
		}
		cn.queue[len(cn.queue)-1].last = true
		cn.flying = true
		cn.mu.Unlock()
		if wt := cn.client.opts.WriteTimeout; wt > 0 {
			_ = nc.SetWriteDeadline(now.Add(wt))
		}
		_, err := nc.Write(out)
		cn.mu.Lock()
		if cap(out) <= 1<<20 {
			cn.out = out[:0]
		}
		if err != nil {
			cn.failLocked(nc, fmt.Errorf("%w: write to %s: %w", ErrConn, cn.client.opts.Addr, err))
		}
	}
	cn.writing = false
}

// compactLocked drops the answered batches from the head of the queue.
func (cn *conn) compactLocked() {
	if cn.head == len(cn.queue) {
		cn.queue, cn.head = cn.queue[:0], 0
	} else if cn.head > 64 && cn.head > len(cn.queue)/2 {
		n := copy(cn.queue, cn.queue[cn.head:])
		clear(cn.queue[n:])
		cn.queue, cn.head = cn.queue[:n], 0
	}
}

// connectLocked returns the connection, starting a dial in the background
// if it is down and none is under way, and waiting for the dial as long as
// ctx lets it. mu is held on entry and on return, but not while waiting.
func (cn *conn) connectLocked(ctx context.Context) (net.Conn, error) {
	for cn.nc == nil {
		if cn.client.closed.Load() {
			return nil, ErrClosed
		}
		wait := cn.dialing
		if wait == nil {
			wait = make(chan struct{})
			cn.dialing = wait
			cn.client.wg.Add(1)
			go cn.dial(wait)
		}
		cn.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			cn.mu.Lock()
			return nil, fmt.Errorf("%w: %w: waiting for a connection to %s: %w", ErrConn, ErrNotSent, cn.client.opts.Addr, ctx.Err())
		}
		cn.mu.Lock()
		if cn.nc == nil && cn.dialErr != nil {
			return nil, cn.dialErr
		}
	}
	return cn.nc, nil
}

// dial connects, runs the handshake and starts the reader, then closes
// done. It runs on its own goroutine, bounded by DialTimeout alone.
func (cn *conn) dial(done chan struct{}) {
	defer cn.client.wg.Done()
	nc, br, err := cn.client.dial(context.Background())
	cn.mu.Lock()
	defer cn.mu.Unlock()
	defer close(done)
	cn.dialing = nil
	if err == nil && cn.client.closed.Load() {
		_ = nc.Close()
		err = ErrClosed
	}
	if cn.dialErr = err; err != nil {
		return
	}
	cn.nc = nc
	cn.client.startWatchdog()
	cn.client.wg.Add(1)
	go cn.read(nc, br)
	cn.flushLocked()
}

// read reads replies from nc until it fails, giving them to the written
// batches in order.
func (cn *conn) read(nc net.Conn, br *bufio.Reader) {
	defer cn.client.wg.Done()
	var b *Batch
	for {
		if _, err := br.Peek(1); err != nil {
			cn.fail(nc, fmt.Errorf("%w: read from %s: %w", ErrConn, cn.client.opts.Addr, err))
			return
		}
		if b == nil {
			cn.mu.Lock()
			if cn.nc != nc {
				cn.mu.Unlock()
				return
			}
			if cn.head == len(cn.queue) {
				cn.failLocked(nc, fmt.Errorf("%w: %w: a reply nobody asked for from %s", ErrConn, ErrProtocol, cn.client.opts.Addr))
				cn.mu.Unlock()
				return
			}
			b = cn.queue[cn.head]
			cn.mu.Unlock()
		}
		if err := readReply(br, &b.replies[b.got]); err != nil {
			cn.fail(nc, fmt.Errorf("%w: read from %s: %w", ErrConn, cn.client.opts.Addr, err))
			return
		}
		b.got++
		if b.got < len(b.replies) {
			continue
		}
		cn.mu.Lock()
		if cn.nc != nc { // failed meanwhile: b has been told
			cn.mu.Unlock()
			return
		}
		cn.queue[cn.head] = nil
		cn.head++
		if b.last {
			// The write's replies are all in: send what accumulated.
			cn.flying = false
			cn.flushLocked()
		}
		cn.mu.Unlock()
		b.done <- struct{}{}
		b = nil
	}
}

// fail closes nc if it is still the connection, failing its batches.
func (cn *conn) fail(nc net.Conn, err error) {
	cn.mu.Lock()
	cn.failLocked(nc, err)
	cn.mu.Unlock()
}

// failLocked closes nc and fails every batch written on it with err, and
// every pending one with err marked not sent, if nc is still the
// connection; otherwise it does nothing, as nc's batches were failed when
// it was replaced.
func (cn *conn) failLocked(nc net.Conn, err error) {
	if nc == nil || cn.nc != nc {
		return
	}
	_ = nc.Close()
	cn.nc = nil
	for i := cn.head; i < len(cn.queue); i++ {
		b := cn.queue[i]
		b.err = err
		b.done <- struct{}{}
		cn.queue[i] = nil
	}
	cn.queue, cn.head = cn.queue[:0], 0
	notSent := fmt.Errorf("%w: %w", ErrNotSent, err)
	for _, b := range cn.pending {
		if b.state.CompareAndSwap(batchPending, batchWritten) {
			b.err = notSent
			b.done <- struct{}{}
		}
	}
	clear(cn.pending)
	cn.pending, cn.pendingN = cn.pending[:0], 0
	cn.flying = false
}

// expire closes the connection if its oldest batch has waited longer than
// the read timeout.
func (cn *conn) expire(now time.Time) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.nc == nil || cn.head == len(cn.queue) {
		return
	}
	if waited := now.Sub(cn.queue[cn.head].sent); waited > cn.client.opts.ReadTimeout {
		cn.failLocked(cn.nc, fmt.Errorf("%w: no reply from %s for %v", ErrConn, cn.client.opts.Addr, waited.Round(time.Millisecond)))
	}
}
