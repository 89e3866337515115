package resp

import (
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// Batch is a sequence of commands sent together and their replies. Build it
// with Command and the argument methods, send it with Client.Do, read
// Reply(i) for the i-th command, then give it back with Client.Release.
//
// A Batch belongs to one goroutine at a time; it is not safe for concurrent
// use.
type Batch struct {
	buf     []byte
	cmds    int // commands written
	args    int // arguments the current command still expects
	replies []Reply
	got     int   // replies read
	err     error // set with done when the connection failed
	done    chan struct{}
	state   atomic.Int32 // batchIdle, batchPending, batchWritten or batchDropped
	cn      *conn        // the connection it was sent on
	nc      net.Conn     // the network connection it was written on
	sent    time.Time    // when it was written
	busy    bool         // sent on a connection and not yet waited out
	last    bool         // the last batch of a write
}

// Batch states: a batch is pending on a connection until it is written or
// dropped (its caller gave up first, and it is never written).
const (
	batchIdle int32 = iota
	batchPending
	batchWritten
	batchDropped
)

func newBatch() *Batch { return &Batch{done: make(chan struct{}, 1)} }

func (b *Batch) reset() {
	b.buf = b.buf[:0]
	b.cmds, b.args, b.got, b.err = 0, 0, 0, nil
	for i := range b.replies {
		b.replies[i].reset()
	}
}

// Len returns the number of commands in the batch.
func (b *Batch) Len() int { return b.cmds }

// Command starts a command of argc arguments, its name included: the next
// argc calls of String, Bytes or Int are its arguments.
func (b *Batch) Command(argc int) {
	b.buf = append(b.buf, '*')
	b.buf = strconv.AppendInt(b.buf, int64(argc), 10)
	b.buf = append(b.buf, '\r', '\n')
	b.cmds++
	b.args += argc
}

// String appends a bulk-string argument.
func (b *Batch) String(s string) { b.buf = appendBulk(b.buf, s); b.args-- }

// Bytes appends a bulk-string argument.
func (b *Batch) Bytes(p []byte) { b.buf = appendBulk(b.buf, p); b.args-- }

// Int appends an integer argument, in decimal.
func (b *Batch) Int(v int64) {
	var digits [20]byte
	b.buf = appendBulk(b.buf, strconv.AppendInt(digits[:0], v, 10))
	b.args--
}

// appendBulk appends v as a RESP bulk string.
func appendBulk[T ~string | ~[]byte](buf []byte, v T) []byte {
	buf = append(buf, '$')
	buf = strconv.AppendInt(buf, int64(len(v)), 10)
	buf = append(buf, '\r', '\n')
	buf = append(buf, v...)
	return append(buf, '\r', '\n')
}

// Reply returns the reply to the i-th command. It is valid after Do
// returned nil, until Release.
func (b *Batch) Reply(i int) *Reply { return &b.replies[i] }

// prepare readies the replies for a send.
func (b *Batch) prepare() {
	if cap(b.replies) < b.cmds {
		b.replies = append(b.replies[:cap(b.replies)], make([]Reply, b.cmds-cap(b.replies))...)
	}
	b.replies = b.replies[:b.cmds]
	b.got, b.err, b.last = 0, nil, false
	b.cn, b.nc = nil, nil
	b.state.Store(batchIdle)
	select { // a stale signal of an earlier use
	case <-b.done:
	default:
	}
}
