package envoysim

import (
	"context"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Priorities is an RLQS cluster on the simulator's clock, as Envoy runs
// one whose hosts are each in a priority of their own, health-checked: a
// new stream goes to the first host the health checks find healthy (the
// first host when none is: Envoy's panic mode). The health checks are
// not run; a host's health follows what the test says of it (SetDown),
// as checks would: unhealthy once it has been down for Unhealthy checks'
// intervals, healthy again once up for Healthy. A stream to a host that
// is down but not yet found so opens, as Envoy's stream start returns at
// once, and then fails: its report is lost (the connect failure comes
// back as a remote close), and the next report tick opens another. It is
// safe for concurrent use.
type Priorities struct {
	clock Clock
	hc    HealthCheck

	mu    sync.Mutex
	hosts []*priorityHost
}

type priorityHost struct {
	dial   Dialer
	down   bool
	change time.Time // of down; zero: never changed
}

// NewPriorities returns the cluster of hosts, in priority order, all up.
func NewPriorities(clock Clock, hc HealthCheck, hosts ...Dialer) *Priorities {
	p := &Priorities{clock: clock, hc: hc}
	for _, d := range hosts {
		p.hosts = append(p.hosts, &priorityHost{dial: d})
	}
	return p
}

// SetDown says host i went down (killed, or not started) or came up.
func (p *Priorities) SetDown(i int, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[i]
	if h.down != down {
		h.down, h.change = down, p.clock.Now()
	}
}

// healthy is what the health checks say of h at now.
func (p *Priorities) healthy(h *priorityHost, now time.Time) bool {
	if h.change.IsZero() {
		return !h.down
	}
	since := now.Sub(h.change)
	if h.down {
		return since < p.hc.Interval*time.Duration(max(p.hc.Unhealthy, 1))
	}
	return since >= p.hc.Interval*time.Duration(max(p.hc.Healthy, 1))
}

// Dial is the cluster's Dialer.
func (p *Priorities) Dial(ctx context.Context) (Stream, error) {
	p.mu.Lock()
	now := p.clock.Now()
	pick := p.hosts[0]
	for _, h := range p.hosts {
		if p.healthy(h, now) {
			pick = h
			break
		}
	}
	down := pick.down
	p.mu.Unlock()
	if down {
		return &failedStream{}, nil
	}
	return pick.dial(ctx)
}

// failedStream is a stream to a host that does not answer its
// connection: what is sent is lost, and it ends at once, Unavailable.
type failedStream struct{}

func (*failedStream) Send(*rlqspb.RateLimitQuotaUsageReports) error { return nil }

func (*failedStream) Recv() (*rlqspb.RateLimitQuotaResponse, error) {
	return nil, status.Error(codes.Unavailable, "envoysim: upstream connect error")
}

func (*failedStream) CloseSend() error { return nil }

// Silent reports that nothing sent on it will be answered.
func (*failedStream) Silent() bool { return true }

// TokenBucket is a token bucket strategy: max tokens, perFill every
// interval.
func TokenBucket(max, perFill uint32, interval time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: max, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(interval)}}}
}
