// Package rawh2 speaks HTTP/2 frames to a gRPC server as a hostile client
// would, for tests: connections that stop after the preface and SETTINGS,
// calls that send their headers and never their request, or only part of
// it. It reads what the server answers on its own goroutine and tallies
// how each call ended.
package rawh2

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Conn is one HTTP/2 connection. Its methods that send are safe for
// concurrent use.
type Conn struct {
	c net.Conn

	wmu  sync.Mutex // guards fr's writes, enc, hbuf and next
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	next uint32 // the next stream ID

	mu     sync.Mutex
	ends   map[uint32]End // how each call ended, by stream ID
	done   chan struct{}  // closed when the reader stops
	errRd  error          // why the reader stopped
	frames int
}

// End is how the server ended a call: the grpc-status of its trailers,
// or the code of a RST_STREAM (Status -1), and when.
type End struct {
	Status int
	Reset  http2.ErrCode
	At     time.Time
}

// Dial connects to addr and sends the client preface and an empty
// SETTINGS frame: the connection is open as far as HTTP/2 goes.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &Conn{c: nc, next: 1, ends: map[uint32]End{}, done: make(chan struct{})}
	c.fr = http2.NewFramer(nc, nc)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.fr.WriteSettings(); err != nil {
		nc.Close()
		return nil, err
	}
	go c.read()
	return c, nil
}

// Open starts a call to the gRPC method path (/package.Service/Method)
// with its headers only, no END_STREAM: the server waits for its request.
// It returns the call's stream ID.
func (c *Conn) Open(path string) (uint32, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	id := c.next
	c.next += 2
	c.hbuf.Reset()
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "rawh2"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return 0, err
		}
	}
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
	return id, err
}

// SendPart sends the first part bytes of a gRPC message that claims to
// be size bytes long, without END_STREAM: the request never finishes
// arriving.
func (c *Conn) SendPart(id uint32, size, part int) error {
	msg := make([]byte, 5+part)
	binary.BigEndian.PutUint32(msg[1:5], uint32(size))
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.fr.WriteData(id, false, msg)
}

// read tallies the server's frames until the connection ends.
func (c *Conn) read() {
	defer close(c.done)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.mu.Lock()
			c.errRd = err
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		c.frames++
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if st := f.PseudoValue("status"); st != "" && st != "200" {
				c.ends[f.StreamID] = End{Status: -1, At: time.Now()}
			}
			for _, hf := range f.RegularFields() {
				if hf.Name == "grpc-status" {
					n, _ := strconv.Atoi(hf.Value)
					c.ends[f.StreamID] = End{Status: n, At: time.Now()}
				}
			}
		case *http2.RSTStreamFrame:
			if _, ok := c.ends[f.StreamID]; !ok {
				c.ends[f.StreamID] = End{Status: -1, Reset: f.ErrCode, At: time.Now()}
			}
		}
		c.mu.Unlock()
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			c.wmu.Lock()
			_ = c.fr.WriteSettingsAck()
			c.wmu.Unlock()
		}
	}
}

// Ends returns how the calls that ended so far ended, by stream ID.
func (c *Conn) Ends() map[uint32]End {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[uint32]End, len(c.ends))
	for id, e := range c.ends {
		out[id] = e
	}
	return out
}

// Closed reports whether the server closed the connection, and how.
func (c *Conn) Closed() (bool, error) {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return true, c.errRd
	default:
		return false, nil
	}
}

// Close closes the connection and waits for the reader.
func (c *Conn) Close() error {
	err := c.c.Close()
	<-c.done
	return err
}

func (e End) String() string {
	if e.Status < 0 {
		return fmt.Sprintf("reset %v", e.Reset)
	}
	return fmt.Sprintf("grpc-status %d", e.Status)
}
