// Package xds subscribes to one resource type of an xDS management server
// over ADS, state of the world, and hands every response to a callback
// whose error NACKs it. It reconnects forever.
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
)

// Defaults of Options.
const (
	DefaultConnectRetry = 3 * time.Second
	DefaultNackPause    = time.Second
)

// maxNackMessage bounds the error text sent with a NACK.
const maxNackMessage = 16 << 10

// Log keys.
const (
	logServer  = "server"
	logRetryIn = "retry_in"
	logCount   = "resources"
)

// Apply takes the resources of one response, which in state of the world
// are all the resources of the type. A nil error ACKs the response; an
// error NACKs it with the error's text, and the caller is expected to keep
// what it had. The Client calls Apply on one goroutine, never twice at
// once; ctx ends when the Client closes.
type Apply func(ctx context.Context, resources []*anypb.Any) error

// Options configure a Client.
type Options struct {
	// ServerURL is the management server's gRPC target, such as
	// "envoy-gateway:18001".
	ServerURL string
	// TypeURL is the resource type subscribed to.
	TypeURL string
	// NodeID and NodeMetadata identify this client to the server, which
	// picks the snapshot by them.
	NodeID       string
	NodeMetadata map[string]string
	// UserAgentName and UserAgentVersion fill the node's user agent.
	UserAgentName, UserAgentVersion string
	// Headers are gRPC metadata sent with the stream, such as credentials.
	Headers map[string]string
	// TLS, if set, secures the connection; nil connects in plaintext.
	TLS *TLS
	// Backoff spaces reconnects after a stream ends.
	Backoff Backoff
	// ConnectRetry is how long to wait, give or take half, after a
	// connection attempt failed. Zero takes DefaultConnectRetry.
	ConnectRetry time.Duration
	// MaxRecvMsgSize is the largest response accepted, in bytes; zero
	// takes gRPC's default (4 MiB).
	MaxRecvMsgSize int
	// NackPause is how long to wait before rejecting again resources
	// that were just rejected: go-control-plane's cache sends a NACKed
	// snapshot straight back, and without a pause the exchange spins.
	// Zero takes DefaultNackPause.
	NackPause time.Duration
	// OnCertRefused, if set, is called with the error each time the TLS
	// client certificate files change to ones that cannot be used
	// (expired, not valid yet, a key that is not the certificate's, a
	// file that does not parse); the last good certificate stays in use.
	// It is called on the Client's goroutine and must not block.
	OnCertRefused func(error)
}

// Client keeps an ADS stream to a management server and applies what it
// sends. New starts nothing; Open starts the stream; Close stops it. A
// Client is not reusable after Close.
type Client struct {
	opts  Options
	apply Apply
	log   *zap.Logger
	node  *core.Node

	// nacked is the last response rejected, to reject it again unapplied.
	nacked *nack
	// clientCert is the last good TLS client certificate, certRefused the
	// last refusal reported (tls.go).
	clientCert  *tls.Certificate
	certRefused string

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type nack struct {
	sum [sha256.Size]byte
	msg string
}

// connectError is a failure to open the stream, as opposed to a stream
// that ends: it is retried after ConnectRetry rather than Backoff.
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

// Open starts subscribing, on a goroutine of its own, and returns at once:
// connection failures are logged and retried, never returned. The
// subscription lasts until Close or until ctx ends.
func (c *Client) Open(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.run(ctx)
	}()
}

// Close ends the stream and waits for an Apply in progress to return. It
// is idempotent.
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
		if !sleep(ctx, wait) {
			return
		}
	}
}

// session connects, opens the stream and applies responses until the
// stream ends. It reports whether any response arrived.
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
	// A new ADS client per stream asks for the server's current state
	// (no version), so a restarted server that reuses version names is
	// not taken to have nothing new.
	ads := sotw.NewADSClient(ctx, c.node, c.opts.TypeURL)
	// Without wait-for-ready, opening the stream fails with the cause once
	// the connection attempt fails, which is what the log needs.
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
		if !sleep(ctx, c.opts.NackPause) {
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

// digest identifies a response's resources by content, in any order: a
// server may send the same resources in another order (go-control-plane's
// cache keeps them in a map).
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

// sleep waits d, or less if ctx ends first; it reports whether ctx is
// still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
