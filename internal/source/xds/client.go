// Package xds subscribes to one resource type of an xDS management server
// over ADS, state of the world, and reconnects forever.
package xds

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fastlimit/fastlimit/pkg/clock"
)

// Defaults of Options.
const (
	DefaultConnectRetry = 3 * time.Second
	DefaultNackPause    = time.Second
)

const maxNackMessage = 16 << 10 // bounds the error text sent with a NACK

// Log keys.
const (
	logServer  = "server"
	logRetryIn = "retry_in"
	logCount   = "resources"
)

// Apply takes the resources of one response: all those of the type. A nil
// error ACKs the response; an error NACKs it with its text, and the caller
// keeps what it had. It is called on one goroutine; ctx ends with the Client.
type Apply func(ctx context.Context, resources []*anypb.Any) error

// Options configure a Client; zero durations take the defaults.
type Options struct {
	ServerURL string // the management server's gRPC target
	TypeURL   string // the resource type subscribed to
	// NodeID and NodeMetadata identify this client; the server picks the
	// snapshot by them.
	NodeID       string
	NodeMetadata map[string]string

	UserAgentName, UserAgentVersion string            // the node's user agent
	Headers                         map[string]string // gRPC metadata of the stream
	TLS                             *TLS              // nil: plaintext
	Backoff                         Backoff           // spaces reconnects after a stream ends
	ConnectRetry                    time.Duration     // wait, give or take half, after a failed connect
	MaxRecvMsgSize                  int               // the largest response, bytes; 0: gRPC's 4 MiB
	// NackPause is the wait before rejecting again resources just rejected
	// (go-control-plane's cache sends a NACKed snapshot straight back).
	NackPause time.Duration
	// OnCertRefused, if set, is called each time the client certificate
	// files change to ones that cannot be used (the last good one stays).
	// It is called on the Client's goroutine and must not block.
	OnCertRefused func(error)
	// Clock spaces the reconnects and NACKs, and tells the client
	// certificate's validity (default: the wall clock).
	Clock Clock
}

// Clock is the time a Client reads and waits on.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Client keeps an ADS stream to a management server and applies what it
// sends (docs/design.md#xds-client). New starts nothing, Open starts the
// stream, Close stops it for good.
type Client struct {
	opts  Options
	apply Apply
	log   *zap.Logger
	node  *core.Node

	nacked      *nack            // the last response rejected, to reject it again unapplied
	clientCert  *tls.Certificate // the last good TLS client certificate (tls.go)
	certRefused string           // the last refusal reported

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type nack struct {
	sum [sha256.Size]byte
	msg string
}

// connectError is a failure to open the stream, retried after ConnectRetry.
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// New returns a Client that hands what the server sends to apply.
func New(opts Options, apply Apply, log *zap.Logger) *Client {
	if opts.ConnectRetry <= 0 {
		opts.ConnectRetry = DefaultConnectRetry
	}
	if opts.NackPause <= 0 {
		opts.NackPause = DefaultNackPause
	}
	if opts.Clock == nil {
		opts.Clock = clock.Wall{}
	}
	md := make(map[string]*structpb.Value, len(opts.NodeMetadata))
	for k, v := range opts.NodeMetadata {
		md[k] = structpb.NewStringValue(v)
	}
	node := &core.Node{Id: opts.NodeID, Metadata: &structpb.Struct{Fields: md}, UserAgentName: opts.UserAgentName}
	if opts.UserAgentVersion != "" {
		node.UserAgentVersionType = &core.Node_UserAgentVersion{UserAgentVersion: opts.UserAgentVersion}
	}
	return &Client{opts: opts, apply: apply, log: log.With(zap.String(logServer, opts.ServerURL)), node: node}
}

// Open starts subscribing on a goroutine of its own, until Close or the end
// of ctx; connection failures are logged and retried, never returned.
func (c *Client) Open(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.run(ctx)
	}()
}

// Close ends the stream and waits for an Apply in progress. It is idempotent.
func (c *Client) Close() {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
}

// run keeps a stream open until ctx ends.
func (c *Client) run(ctx context.Context) {
	retry := 0     // stream retries since a stream last delivered
	lastFail := "" // the last connect failure, logged once in a row
	for {
		received, err := c.session(ctx)
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		if ce := (*connectError)(nil); errors.As(err, &ce) {
			wait = jittered(c.opts.ConnectRetry, rand.Float64)
			log := c.log.Debug
			if err.Error() != lastFail {
				log = c.log.Warn
			}
			lastFail = err.Error()
			log("cannot connect to the xDS server", zap.Error(err), zap.Duration(logRetryIn, wait))
		} else {
			lastFail = ""
			if received {
				retry = 0
			}
			wait = c.opts.Backoff.Delay(retry, rand.Float64)
			retry++
			c.log.Warn("xDS stream ended; reconnecting", zap.Error(err), zap.Duration(logRetryIn, wait))
		}
		if !c.sleep(ctx, wait) {
			return
		}
	}
}

// session runs one stream and reports whether any response arrived.
func (c *Client) session(ctx context.Context) (received bool, err error) {
	opts, err := c.dialOptions()
	if err != nil {
		return false, &connectError{err}
	}
	conn, err := grpc.NewClient(c.opts.ServerURL, opts...)
	if err != nil {
		return false, &connectError{err}
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.opts.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.opts.Headers))
	}
	// A new ADS client per stream asks for the current state (no version).
	ads := sotw.NewADSClient(ctx, c.node, c.opts.TypeURL)
	// Without wait-for-ready, this fails with the connection's error.
	if err := ads.InitConnect(conn); err != nil {
		return false, &connectError{fmt.Errorf("open stream: %w", err)}
	}
	c.log.Info("xDS stream open")
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return received, fmt.Errorf("receive: %w", err)
		}
		received = true
		if err := c.handle(ctx, ads, resp.Resources); err != nil {
			return received, fmt.Errorf("answer: %w", err)
		}
	}
}

func (c *Client) dialOptions() ([]grpc.DialOption, error) {
	creds := insecure.NewCredentials()
	if c.opts.TLS != nil {
		cfg, err := c.clientTLS()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if c.opts.MaxRecvMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.opts.MaxRecvMsgSize)))
	}
	return opts, nil
}

// handle applies one response and ACKs or NACKs it.
func (c *Client) handle(ctx context.Context, ads sotw.ADSClient, res []*anypb.Any) error {
	sum := digest(res)
	if c.nacked != nil && c.nacked.sum == sum {
		c.log.Debug("xDS server sent rejected resources again; rejecting them after a pause",
			zap.Int(logCount, len(res)), zap.Duration(logRetryIn, c.opts.NackPause))
		if !c.sleep(ctx, c.opts.NackPause) {
			return ctx.Err()
		}
		return ads.Nack(c.nacked.msg)
	}
	if err := c.apply(ctx, res); err != nil {
		msg := err.Error()
		if len(msg) > maxNackMessage {
			msg = msg[:maxNackMessage] + "..."
		}
		c.nacked = &nack{sum: sum, msg: msg}
		return ads.Nack(msg)
	}
	c.nacked = nil
	return ads.Ack()
}

// digest identifies a response's resources by content, in any order.
func digest(res []*anypb.Any) [sha256.Size]byte {
	sums := make([][sha256.Size]byte, len(res))
	for i, r := range res {
		h := sha256.New()
		for _, b := range [][]byte{[]byte(r.GetTypeUrl()), r.GetValue()} {
			h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
			h.Write(b)
		}
		h.Sum(sums[i][:0])
	}
	slices.SortFunc(sums, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	for _, s := range sums {
		h.Write(s[:])
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// sleep waits d on the Client's clock, or until ctx ends; it reports
// whether ctx is still live.
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-c.opts.Clock.After(d):
		return true
	}
}
