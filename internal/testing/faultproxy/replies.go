package faultproxy

import (
	"bufio"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"
)

// readUpstream parses the upstream's replies and hands them to
// writeReplies, in order.
func (c *conn) readUpstream(up net.Conn) {
	defer close(c.replies)
	r := bufio.NewReaderSize(up, 32<<10)
	for {
		raw, v, err := readValue(r, c.p.o.MaxValue, false)
		if err != nil {
			if errors.Is(err, ErrMalformed) {
				c.close(false, "reply: "+err.Error())
			}
			return
		}
		select {
		case c.replies <- upReply{raw: raw, at: time.Now(), push: v.Kind == KindPush}:
		case <-c.done:
			return
		}
	}
}

// writeReplies delivers replies to the client in command order: faked
// ones as their turn comes, upstream ones as they arrive.
func (c *conn) writeReplies() {
	w := bufio.NewWriterSize(c.client, 32<<10)
	for {
		if !c.deliverLocal(w) {
			return
		}
		if len(c.replies) == 0 {
			if err := w.Flush(); err != nil {
				c.close(false, "")
				return
			}
		}
		select {
		case <-c.done:
			return
		case <-c.pendSig:
		case r, ok := <-c.replies:
			if !ok {
				// Redis closed the connection: what it sent is
				// delivered, the rest is lost.
				if c.deliverLocal(w) {
					_ = w.Flush()
				}
				c.close(false, "")
				return
			}
			if !c.deliverLocal(w) {
				return
			}
			var e *entry
			if !r.push && !c.unpaired.Load() {
				e = c.pop()
			}
			if e == nil {
				e = c.unpairedEntry()
			}
			if !c.deliver(w, e, r.raw, r.at) {
				return
			}
		}
	}
}

// deliverLocal delivers the faked replies at the head of the queue.
func (c *conn) deliverLocal(w *bufio.Writer) bool {
	for e := c.popLocal(); e != nil; e = c.popLocal() {
		if !c.deliver(w, e, e.fake, e.at) {
			return false
		}
	}
	return true
}

// unpairedEntry is the entry of a reply that answers no command, with the
// reply faults whose Match allows that.
func (c *conn) unpairedEntry() *entry {
	e := &entry{}
	for _, r := range c.p.ruleList() {
		switch f := r.fault.(type) {
		case *DropMidReply, *ExtraReply, *HoldReplies, *SplitReplies:
			if c.take(r, nil, false) {
				e.acts = append(e.acts, r)
			}
		case *Freeze:
			if !f.Requests && c.take(r, nil, false) {
				e.acts = append(e.acts, r)
			}
		}
	}
	return e
}

// deliver writes raw, the reply to e, applying e's faults. It reports
// false once the connection is closed.
func (c *conn) deliver(w *bufio.Writer, e *entry, raw []byte, at time.Time) bool {
	if e.drop {
		_ = w.Flush()
		c.close(false, "DropRequest: "+e.cmd.String()+" not sent")
		return false
	}
	if e.lose {
		_ = w.Flush()
		c.close(false, "DropAndLose: reply to "+e.cmd.String()+" lost")
		return false
	}
	raw = c.p.rewrite(e.cmd, raw)
	if !c.hold(w, e, at) {
		return false
	}
	var split *SplitReplies
	var splitRule *Rule
	for _, r := range e.acts {
		switch f := r.fault.(type) {
		case *ExtraReply:
			if f.Before && !c.write(w, f.bytes()) {
				return false
			}
		case *DropMidReply:
			k := max(min(f.After, len(raw)-1), 0)
			_, _ = w.Write(raw[:k])
			_ = w.Flush()
			c.close(f.Reset, "DropMidReply after "+strconv.Itoa(k)+" of "+strconv.Itoa(len(raw))+" bytes")
			return false
		case *SplitReplies:
			if split == nil {
				split, splitRule = f, r
			}
		}
	}
	if split != nil {
		if !c.writeSplit(w, raw, split, splitRule) {
			return false
		}
	} else if _, err := w.Write(raw); err != nil {
		c.close(false, "")
		return false
	}
	c.p.replies.Add(1)
	if e.cmd == nil {
		c.p.unpaired.Add(1)
	} else if e.cmd.Name == "HELLO" && len(e.cmd.Args) > 0 && raw[0] != KindError {
		c.resp3.Store(e.cmd.Args[0] == "3")
	}
	for _, r := range e.acts {
		if f, ok := r.fault.(*ExtraReply); ok && !f.Before && !c.write(w, f.bytes()) {
			return false
		}
	}
	return true
}

// hold waits as e's HoldReplies, Freeze and SlowHandshake rules say,
// after flushing what came before.
func (c *conn) hold(w *bufio.Writer, e *entry, at time.Time) bool {
	for _, r := range e.acts {
		var until time.Time
		var released <-chan struct{} = r.released
		switch f := r.fault.(type) {
		case *HoldReplies:
			until = at.Add(f.Delay)
		case *SlowHandshake:
			until = at.Add(f.Delay)
		case *Freeze:
			until = time.Now().Add(24 * time.Hour)
		default:
			continue
		}
		d := time.Until(until)
		if d <= 0 {
			continue
		}
		if err := w.Flush(); err != nil {
			c.close(false, "")
			return false
		}
		c.p.holding.Add(1)
		ok := c.sleep(d, released)
		c.p.holding.Add(-1)
		if !ok {
			return false
		}
	}
	return true
}

// write writes an injected reply; it counts as a reply that answers no
// command.
func (c *conn) write(w *bufio.Writer, b []byte) bool {
	if _, err := w.Write(b); err != nil {
		c.close(false, "")
		return false
	}
	c.p.replies.Add(1)
	c.p.unpaired.Add(1)
	return true
}

func (c *conn) writeSplit(w *bufio.Writer, raw []byte, f *SplitReplies, r *Rule) bool {
	if err := w.Flush(); err != nil {
		c.close(false, "")
		return false
	}
	for len(raw) > 0 {
		n := min(r.chunk(f.MaxChunk), len(raw))
		if _, err := c.client.Write(raw[:n]); err != nil {
			c.close(false, "")
			return false
		}
		raw = raw[n:]
		if len(raw) > 0 && f.Gap > 0 && !c.sleep(f.Gap, nil) {
			return false
		}
	}
	return true
}

func (f *ExtraReply) bytes() []byte {
	if f.Raw != nil {
		return f.Raw
	}
	return f.Reply.Bytes()
}

func upper(s string) string { return strings.ToUpper(s) }
