package envoysim

import (
	"context"
	"errors"
	"sync"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// ErrUnreachable fails the dials of a Switch that is black-holed or
// refusing.
var ErrUnreachable = errors.New("envoysim: server unreachable")

// Switch is the way to one RLQS server, which a test can cut: black-holed
// (a node lost without a reset: open streams stay open, what is sent
// vanishes, nothing arrives, pings go unanswered, and no new connection
// is made) or refused (open streams end, new ones are refused). Its
// streams answer pings while it is on. It is safe for concurrent use.
type Switch struct {
	dial Dialer

	mu      sync.Mutex
	state   switchState
	streams map[*switched]struct{}
}

type switchState uint8

const (
	switchOn switchState = iota
	switchHole
	switchRefused
)

// NewSwitch returns a Switch, on, to the server dial reaches.
func NewSwitch(dial Dialer) *Switch {
	return &Switch{dial: dial, streams: map[*switched]struct{}{}}
}

// Dial is the Switch's Dialer.
func (s *Switch) Dial(ctx context.Context) (Stream, error) {
	s.mu.Lock()
	on := s.state == switchOn
	s.mu.Unlock()
	if !on {
		return nil, ErrUnreachable
	}
	ctx, cancel := context.WithCancel(ctx)
	in, err := s.dial(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	st := &switched{sw: s, in: in, ctx: ctx, cancel: cancel}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		delete(s.streams, st)
		s.mu.Unlock()
	})
	return st, nil
}

// BlackHole cuts the way without a reset.
func (s *Switch) BlackHole() { s.set(switchHole) }

// Refuse cuts the way with a reset: open streams end.
func (s *Switch) Refuse() {
	s.set(switchRefused)
	s.mu.Lock()
	defer s.mu.Unlock()
	for st := range s.streams {
		st.cancel()
	}
}

// Restore turns the way on again, for new streams.
func (s *Switch) Restore() { s.set(switchOn) }

func (s *Switch) set(st switchState) {
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
}

func (s *Switch) holed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == switchHole
}

// switched is a stream through a Switch.
type switched struct {
	sw     *Switch
	in     Stream
	ctx    context.Context
	cancel context.CancelFunc
}

func (st *switched) Send(r *rlqspb.RateLimitQuotaUsageReports) error {
	if st.sw.holed() {
		return nil
	}
	return st.in.Send(r)
}

// Recv drops what arrives through a black hole, and its end too: only
// the stream's own end (its context) ends it then.
func (st *switched) Recv() (*rlqspb.RateLimitQuotaResponse, error) {
	for {
		r, err := st.in.Recv()
		if !st.sw.holed() {
			return r, err
		}
		if err != nil {
			<-st.ctx.Done()
			return nil, st.ctx.Err()
		}
	}
}

func (st *switched) CloseSend() error { return st.in.CloseSend() }

// Silent reports whether the stream is black-holed.
func (st *switched) Silent() bool { return st.sw.holed() }

// Ping is answered at once, or never through a black hole.
func (st *switched) Ping() <-chan struct{} {
	ch := make(chan struct{})
	if !st.sw.holed() {
		close(ch)
	}
	return ch
}
