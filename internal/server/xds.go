package server

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fastlimit/fastlimit/internal/settings"
	"github.com/fastlimit/fastlimit/internal/source/xds"
	"github.com/fastlimit/fastlimit/pkg/rules"
)

// causeXDS is the cause logged for rules from the xDS server.
const causeXDS = "xds"

// xdsClient returns the xDS client's options; Validate has passed. It also
// returns the node metadata entries that it ignores.
func xdsClient(o *settings.XDS, version string) (xds.Options, []string) {
	md, ignored := settings.ParseNodeMetadata(o.NodeMetadata)
	headers, _ := settings.ParseHeaders(o.Headers)
	return xds.Options{
		ServerURL:        o.Server,
		TypeURL:          rules.XDSTypeURL,
		NodeID:           o.NodeID,
		NodeMetadata:     md,
		UserAgentName:    "fastlimit",
		UserAgentVersion: version,
		Headers:          headers,
		TLS:              o.ClientTLS(),
		Backoff:          o.Backoff,
		ConnectRetry:     o.ConnectRetryInterval,
		MaxRecvMsgSize:   o.MaxResponseBytes,
	}, ignored
}

// openXDS starts the xDS client. Without --xds-start-without-rules
// it waits until a first snapshot has been applied (bad ones are NACKed
// and waited past), or until ctx ends; with it, it returns at once and
// requests are answered with an error until rules arrive.
func (s *Server) openXDS(ctx context.Context) error {
	opts, ignored := xdsClient(&s.opts.XDS, s.version)
	refused := s.tlsRefused.WithLabelValues("xds_client")
	opts.OnCertRefused = func(error) { refused.Inc() }
	opts.Clock = s.clock
	log := s.log.Named("xds")
	if len(ignored) > 0 {
		log.Warn("CONFIG_GRPC_XDS_NODE_METADATA: entries without '=' are ignored", zap.Strings("entries", ignored))
	}
	src, err := newXDSSource(s.rules, s.opts.Rules().Overlay, s.clock, log.Named("overlay"))
	if err != nil {
		return fmt.Errorf("load the rules overlay (%s): %w", s.opts.Name("rules-overlay"), err)
	}
	s.xdsSrc = src
	first := make(chan struct{})
	applied := false
	apply := func(_ context.Context, res []*anypb.Any) error {
		if err := s.applyXDS(res); err != nil {
			return err
		}
		if !applied {
			applied = true
			close(first)
		}
		return nil
	}
	s.xds = startXDS(context.WithoutCancel(ctx), opts, apply, src, log)
	log.Info("rules come from an xDS server", zap.String("server", opts.ServerURL), zap.String("node", opts.NodeID),
		zap.Bool("tls", opts.TLS != nil), zap.Bool("force_start", s.opts.XDS.StartWithoutRules))
	if s.opts.XDS.StartWithoutRules {
		return nil
	}
	select {
	case <-first:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the first rules from the xDS server %s: %w", opts.ServerURL, ctx.Err())
	}
}

// xdsRules is the xDS client that feeds the rules, and the SIGHUP handler
// that says there is nothing to reload (SIGHUP would otherwise end the
// process).
type xdsRules struct {
	client *xds.Client
	source *xdsSource // watches the overlay
	cancel context.CancelFunc
	done   chan struct{}
}

func startXDS(ctx context.Context, opts xds.Options, apply xds.Apply, src *xdsSource, log *zap.Logger) *xdsRules {
	ctx, cancel := context.WithCancel(ctx)
	x := &xdsRules{client: xds.New(opts, apply, log), source: src, cancel: cancel, done: make(chan struct{})}
	src.watch(ctx)
	x.client.Open(ctx)
	onSIGHUP(ctx, x.done, func() {
		if !src.trigger(ctx) {
			log.Info("SIGHUP: rules come from the xDS server; nothing to reload")
		}
	})
	return x
}

// Close stops the client and the overlay's watch; an update in progress
// finishes first. It is idempotent.
func (x *xdsRules) Close() {
	x.cancel()
	<-x.done
	x.client.Close()
	x.source.close()
}

// applyXDS validates the RateLimitConfig resources of a snapshot, with the
// rules overlay, and swaps them in, as a reload of files does; its error
// NACKs the snapshot.
func (s *Server) applyXDS(res []*anypb.Any) error {
	if s.xdsSrc == nil { // a test's server, not opened
		s.xdsSrc = &xdsSource{rules: s.rules, log: s.log}
	}
	return s.xdsSrc.apply(res)
}
