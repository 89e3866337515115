package envoysim

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// tallyKey is the metadata that names a tallied stream to the server.
const tallyKey = "x-envoysim-stream"

// Tally counts, on each open stream, the messages the server sent and
// those the Envoy's reader took, so that a test stepping a clock knows
// when no push of the server is still in flight: a quiet time alone can
// be outrun by a loaded machine, and a cut that lands a step late lets
// the Envoys hold more than the server assigned. It also counts the
// streams an Envoy ended whose server handler has not returned yet, so
// that the clock does not move on before the server has seen the end (a
// stream's end frees what its Envoy held at the time it ends). Its
// Dialer wraps the Envoys' dials, its Interceptor the server. It is safe
// for concurrent use.
type Tally struct {
	next    atomic.Uint64
	mu      sync.Mutex
	streams map[string]*tallied // open streams, by id
	closing map[*tallied]bool   // ended by their Envoy, still served
}

type tallied struct {
	sent, taken        atomic.Int64
	reported, received atomic.Int64 // reports the Envoy sent, the server's reader took
	serving            bool         // the server's handler runs; guarded by Tally.mu
}

// NewTally returns an empty Tally.
func NewTally() *Tally { return &Tally{streams: map[string]*tallied{}, closing: map[*tallied]bool{}} }

// Pending returns the messages sent on open streams and not yet taken by
// their Envoy (in its inbox, where Fleet drains them), the reports sent
// on streams the server serves and not yet taken by its reader, and the
// streams ended by their Envoy that the server still serves. (A report
// still on its way must hold the clock too: an answer the Envoy waits
// for can be a push of another report's settle that names the same
// bucket, and the report, come a few steps late, then tells of a
// period that the clock has left.)
func (t *Tally) Pending() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := int64(len(t.closing))
	for _, s := range t.streams {
		n += s.sent.Load() - s.taken.Load()
		if s.serving {
			n += s.reported.Load() - s.received.Load()
		}
	}
	return n
}

// end stops counting a stream: what was sent on it and not taken is lost;
// until its server handler returns, it counts as closing.
func (t *Tally) end(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ts := t.streams[id]; ts != nil && ts.serving {
		t.closing[ts] = true
	}
	delete(t.streams, id)
}

// Dialer wraps d so that each stream carries an id to the server and
// counts what its reader takes.
func (t *Tally) Dialer(d Dialer) Dialer {
	return func(ctx context.Context) (Stream, error) {
		id := strconv.FormatUint(t.next.Add(1), 10)
		ts := &tallied{}
		t.mu.Lock()
		t.streams[id] = ts
		t.mu.Unlock()
		s, err := d(metadata.AppendToOutgoingContext(ctx, tallyKey, id))
		if err != nil {
			t.end(id)
			return nil, err
		}
		context.AfterFunc(ctx, func() { t.end(id) })
		return &talliedStream{Stream: s, t: t, id: id, ts: ts}, nil
	}
}

// talliedStream counts a message as taken when its reader comes back for
// the next: Envoy.read has put it in the inbox by then.
type talliedStream struct {
	Stream
	t       *Tally
	id      string
	ts      *tallied
	holding bool
}

// CloseSend ends the stream's count at once: the Envoy that closes it
// cancels it next, and the server must be seen to end it before the
// clock moves on (a cancel's own notice comes from another goroutine).
func (s *talliedStream) CloseSend() error {
	s.t.end(s.id)
	return s.Stream.CloseSend()
}

// Send counts a report before it is sent, so that it is never taken
// before it is counted, and uncounts it if the send fails.
func (s *talliedStream) Send(r *rlqspb.RateLimitQuotaUsageReports) error {
	s.ts.reported.Add(1)
	err := s.Stream.Send(r)
	if err != nil {
		s.ts.reported.Add(-1)
	}
	return err
}

func (s *talliedStream) Recv() (*rlqspb.RateLimitQuotaResponse, error) {
	if s.holding {
		s.ts.taken.Add(1)
		s.holding = false
	}
	r, err := s.Stream.Recv()
	if err != nil {
		s.t.end(s.id)
		return nil, err
	}
	s.holding = true
	return r, nil
}

// Interceptor counts what the server sends on each tallied stream.
func (t *Tally) Interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ids := metadata.ValueFromIncomingContext(ss.Context(), tallyKey)
		if len(ids) == 0 {
			return handler(srv, ss)
		}
		t.mu.Lock()
		ts := t.streams[ids[0]]
		if ts != nil {
			ts.serving = true
		}
		t.mu.Unlock()
		if ts == nil {
			return handler(srv, ss)
		}
		defer func() {
			t.mu.Lock()
			ts.serving = false
			delete(t.closing, ts)
			t.mu.Unlock()
		}()
		return handler(srv, &countingStream{ServerStream: ss, ts: ts})
	}
}

// countingStream counts a message before it is sent, so that it is never
// taken before it is counted, and uncounts it if the send fails; it
// counts a report as taken when the server's reader comes back for the
// next (it has handed it on by then: rlqs.Service counts it in hand).
type countingStream struct {
	grpc.ServerStream
	ts      *tallied
	holding bool
}

func (s *countingStream) RecvMsg(m any) error {
	if s.holding {
		s.ts.received.Add(1)
		s.holding = false
	}
	err := s.ServerStream.RecvMsg(m)
	s.holding = err == nil
	return err
}

func (s *countingStream) SendMsg(m any) error {
	s.ts.sent.Add(1)
	err := s.ServerStream.SendMsg(m)
	if err != nil {
		s.ts.sent.Add(-1)
	}
	return err
}
