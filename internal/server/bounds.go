package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/fastlimit/fastlimit/internal/edge/connlimit"
	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// Bounds of gRPC connections that have no flag.
const (
	// grpcConnectionTimeout bounds a new connection's TLS and HTTP/2
	// handshakes (gRPC's default is 120 s).
	grpcConnectionTimeout = 10 * time.Second
	// grpcWindow is the flow-control window of a call, and 16 of them a
	// connection's: what a client can park unread in the server. Setting
	// them turns gRPC's dynamic windows (BDP estimation) off.
	grpcWindow = 64 << 10
	// grpcMaxHeaderList bounds a call's headers (gRPC's default is 16 MiB).
	grpcMaxHeaderList = 64 << 10
)

// errRequestTimeout is the cause of a call dropped at --grpc-request-timeout.
var errRequestTimeout = errors.New("call not finished within --grpc-request-timeout")

// grpcBounds enforces and counts what gRPC clients can open and hold,
// beyond the connection cap (connlimit): calls in flight per connection,
// the time a unary call may take, its request's arrival included, and
// idle connections. It is the server's tap.ServerInHandle and wraps its
// listener; gRPC offers no per-message read deadline and counts none of
// its own refusals, so both are done here. (A stats.Handler would see
// connections too, but gRPC then reports every call's every message to
// it, its headers copied: BENCHMARKS.md has its cost.)
//
// The tap runs on a connection's reader when a call's headers arrive,
// before the call is created. It counts the connection's calls in flight
// (the count lives in the connection's peer address, which the listener
// gives each connection) and refuses one past MaxStreams with
// ResourceExhausted: no goroutine, no buffer. An admitted unary call gets
// a context with the request timeout, which gRPC makes the call's
// transport context: a request whose bytes have not all arrived by then
// fails its read, and the call ends, freeing its goroutine and what it
// had buffered. The count drops when that context ends, which gRPC does
// for every call that ends.
type grpcBounds struct {
	o     settings.GRPCBounds
	unary map[string]bool // full method names of unary methods; set before serving

	streamsRefused atomic.Int64
	timedOut       atomic.Int64
	idleClosed     atomic.Int64
}

// connState is a connection's calls in flight and when the last one ended.
type connState struct {
	inflight atomic.Int64
	lastEnd  atomic.Int64 // Unix ns; the connection's start before any call
}

// listener gives each connection accepted on l its connState, as its
// remote address (gRPC's peer address), and counts the connections that
// end after MaxIdle without a call: the ones gRPC closed as idle.
func (b *grpcBounds) listener(l net.Listener) net.Listener { return boundedListener{l, b} }

type boundedListener struct {
	net.Listener
	b *grpcBounds
}

func (l boundedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	bc := &boundedConn{Conn: c, b: l.b}
	bc.addr.Addr = c.RemoteAddr()
	bc.addr.state.lastEnd.Store(time.Now().UnixNano())
	return bc, nil
}

// boundedConn is an accepted connection and its state.
type boundedConn struct {
	net.Conn
	b    *grpcBounds
	addr connAddr
	once sync.Once
}

// connAddr is a connection's remote address, and its state.
type connAddr struct {
	net.Addr
	state connState
}

func (c *boundedConn) RemoteAddr() net.Addr { return &c.addr }

func (c *boundedConn) Close() error {
	c.once.Do(func() {
		cs := &c.addr.state
		if c.b.o.MaxConnectionIdle > 0 && cs.inflight.Load() == 0 &&
			time.Since(time.Unix(0, cs.lastEnd.Load())) >= c.b.o.MaxConnectionIdle {
			c.b.idleClosed.Add(1)
		}
	})
	return c.Conn.Close()
}

// connStateOf returns the state of ctx's connection, nil for one the
// listener did not accept.
func connStateOf(ctx context.Context) *connState {
	if p, ok := peer.FromContext(ctx); ok {
		if a, ok := p.Addr.(*connAddr); ok {
			return &a.state
		}
	}
	return nil
}

// options are the gRPC server options of the bounds.
func (b *grpcBounds) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		// Advertised one above our own cap, so that the tap, which counts,
		// refuses first.
		grpc.MaxConcurrentStreams(uint32(b.o.MaxConcurrentStreams) + 1),
		grpc.InTapHandle(b.tap),
		grpc.ConnectionTimeout(grpcConnectionTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: b.o.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.InitialWindowSize(grpcWindow),
		grpc.InitialConnWindowSize(16 * grpcWindow),
		grpc.MaxHeaderListSize(grpcMaxHeaderList),
	}
}

// setMethods records which of g's methods are unary: only they get the
// request timeout (a server stream, such as health's Watch, may last).
func (b *grpcBounds) setMethods(g *grpc.Server) {
	if b.unary == nil {
		b.unary = map[string]bool{}
	}
	for name, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			if !m.IsClientStream && !m.IsServerStream {
				b.unary["/"+name+"/"+m.Name] = true
			}
		}
	}
}

func (b *grpcBounds) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	cs := connStateOf(ctx)
	if cs != nil && cs.inflight.Add(1) > int64(b.o.MaxConcurrentStreams) {
		cs.inflight.Add(-1)
		b.streamsRefused.Add(1)
		return nil, status.Errorf(codes.ResourceExhausted, "more than %d calls in flight on this connection", b.o.MaxConcurrentStreams)
	}
	// The caller's own deadline (grpc-timeout, which Envoy always sends)
	// is already the context's: a timer of ours is needed only when it is
	// later than the request timeout, or missing.
	cancel := context.CancelFunc(nil)
	if b.o.RequestTimeout > 0 && b.unary[info.FullMethodName] && !limiter.DeadlineWithin(ctx, time.Now(), b.o.RequestTimeout) {
		ctx, cancel = context.WithTimeoutCause(ctx, b.o.RequestTimeout, errRequestTimeout)
	}
	if cs != nil || cancel != nil {
		// gRPC cancels the call's context when the call ends, which
		// stops the timer; cancel then only releases the value.
		context.AfterFunc(ctx, func() {
			if cancel != nil {
				if context.Cause(ctx) == errRequestTimeout {
					b.timedOut.Add(1)
				}
				cancel()
			}
			if cs != nil {
				cs.lastEnd.Store(time.Now().UnixNano())
				cs.inflight.Add(-1)
			}
		})
	}
	return ctx, nil
}

// grpcConnCap is the gRPC listener's connection cap: --grpc-max-connections
// lowered by the open-files limit (connlimit.Budget), leaving room for the
// Redis pool, the HTTP listeners and a reserve. Where the limit cannot be
// read, --grpc-max-connections alone (DefaultGRPCMaxConns if 0).
func grpcConnCap(o *settings.Settings, files, httpConns int) (int, error) {
	if files <= 0 {
		if o.GRPC.MaxConnections > 0 {
			return o.GRPC.MaxConnections, nil
		}
		return settings.DefaultGRPCMaxConns, nil
	}
	return connlimit.Budget{Files: files, Redis: redisConns(o), HTTP: httpConns, Max: o.GRPC.MaxConnections}.Cap()
}

// redisConns estimates the most connections the store opens to Redis:
// the pool size (10 per CPU unless set) per server reached, and with
// RLQS its demand exchanges' pool and subscriber. A Cluster's nodes are
// not known before it answers: the seeds given, at least 6.
func redisConns(o *settings.Settings) int {
	if o.Redis.Client.URL == "" {
		return 0
	}
	pool := o.Redis.PoolConns()
	if o.RLQS.Enabled {
		pool += o.RLQS.RedisPoolConns() + 1
	}
	addrs := len(strings.Split(o.Redis.Client.URL, ","))
	switch strings.ToLower(o.Redis.Client.Type) {
	case "cluster":
		return pool * max(addrs, 6)
	case "sentinel":
		return pool + addrs // the master's pool, a connection per sentinel
	}
	return pool
}

// httpConnCap is each HTTP listener's connection cap: 256, or a 16th of
// the open-files limit when that is lower (but 16 at least).
func httpConnCap(files int) int {
	if files <= 0 {
		return 256
	}
	return max(16, min(256, files/16))
}
