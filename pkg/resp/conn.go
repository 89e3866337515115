package resp

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// conn is one connection that batches share. Senders append their encoded
// commands to wbuf and their batch to the queue under mu, in the same
// order. One write is in flight at a time: a write goes out when the
// replies to the previous one are all in, so that batches arriving while
// Redis works leave together in the next write. With nothing in flight, a
// sender writes its batch at once, adding no latency; under load, writes
// grow with the load, and Redis and the server pay one system call per
// write rather than per batch. The sender that finds the connection idle
// writes (and keeps writing what others append meanwhile); when a write's
// replies are in, the reader goroutine writes what accumulated. The reader
// reads replies in order and hands them to the batch at the head of the
// queue.
type conn struct {
	client *Client

	mu      sync.Mutex
	nc      net.Conn      // nil when down
	dialing chan struct{} // closed when the dial under way ends
	wbuf    []byte        // bytes of queued batches not yet written
	spare   []byte
	writing bool     // a goroutine is writing wbuf out
	flying  bool     // a write's replies are not all in
	queue   []*Batch // batches awaiting replies, oldest at head
	head    int
}

// send queues b on the connection, dialling it first if it is down, and
// writes it out unless another sender is writing.
func (cn *conn) send(ctx context.Context, b *Batch) error {
	cn.mu.Lock()
	if _, err := cn.connectLocked(ctx); err != nil {
		cn.mu.Unlock()
		return err
	}
	b.busy = true
	b.sent = time.Now()
	if cn.head == len(cn.queue) {
		cn.queue, cn.head = cn.queue[:0], 0
	} else if cn.head > 64 && cn.head > len(cn.queue)/2 {
		n := copy(cn.queue, cn.queue[cn.head:])
		clear(cn.queue[n:])
		cn.queue, cn.head = cn.queue[:n], 0
	}
	cn.queue = append(cn.queue, b)
	cn.wbuf = append(cn.wbuf, b.buf...)
	cn.flushLocked()
	cn.mu.Unlock()
	return nil
}

// flushLocked writes wbuf out unless a write is under way or awaits its
// replies. mu is held on entry and on return, but not while writing.
func (cn *conn) flushLocked() {
	if cn.writing || cn.flying {
		return
	}
	cn.writing = true
	// wbuf holds bytes for the current connection only: failLocked empties
	// it when the connection goes, and a new one may be up by the time a
	// write returns.
	for len(cn.wbuf) > 0 && cn.nc != nil && !cn.flying {
		nc := cn.nc
		out := cn.wbuf
		cn.wbuf = cn.spare[:0]
		cn.queue[len(cn.queue)-1].last = true
		cn.flying = true
		cn.mu.Unlock()
		_, err := nc.Write(out)
		cn.mu.Lock()
		cn.spare = out[:0]
		if err != nil {
			cn.failLocked(nc, fmt.Errorf("%w: write to %s: %w", ErrConn, cn.client.opts.Addr, err))
		}
	}
	cn.writing = false
}

// connectLocked returns the connection, dialling it if it is down. Other
// senders wait for a dial under way, as long as their ctx lets them. mu is
// held on entry and on return, but not while dialling.
func (cn *conn) connectLocked(ctx context.Context) (net.Conn, error) {
	for cn.nc == nil {
		if cn.client.closed.Load() {
			return nil, ErrClosed
		}
		if wait := cn.dialing; wait != nil {
			cn.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				cn.mu.Lock()
				return nil, fmt.Errorf("%w: waiting for a connection to %s: %w", ErrConn, cn.client.opts.Addr, ctx.Err())
			}
			cn.mu.Lock()
			continue
		}
		done := make(chan struct{})
		cn.dialing = done
		cn.mu.Unlock()
		nc, br, err := cn.client.dial(ctx)
		cn.mu.Lock()
		cn.dialing = nil
		close(done)
		if err != nil {
			return nil, err
		}
		if cn.client.closed.Load() {
			_ = nc.Close()
			return nil, ErrClosed
		}
		cn.nc = nc
		cn.client.startWatchdog()
		cn.client.wg.Add(1)
		go cn.read(nc, br)
	}
	return cn.nc, nil
}

// read reads replies from nc until it fails, giving them to the queued
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

// failLocked closes nc and fails every queued batch with err, if nc is
// still the connection; otherwise it does nothing, as nc's batches were
// failed when it was replaced.
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
	cn.wbuf = cn.wbuf[:0]
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
