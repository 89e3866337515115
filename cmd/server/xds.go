package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/anypb"

	config "github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/xds"
)

// Values of --config-type (CONFIG_TYPE), taken in any case.
const (
	configTypeFile = "FILE"
	configTypeXDS  = "GRPC_XDS_SOTW"
)

// causeXDS is the cause logged for rules from the xDS server.
const causeXDS = "xds"

// xdsOptions configure rules over xDS. The flags are named so that their
// environment twins are envoyproxy/ratelimit's variables, with its
// defaults.
type xdsOptions struct {
	configType   string
	forceStart   bool
	nodeID       string
	nodeMetadata string
	serverURL    string
	headers      string
	useTLS       bool
	certFile     string
	keyFile      string
	caFile       string
	serverSAN    string
	backoff      xds.Backoff
	connectRetry time.Duration
	maxMsgSize   int
}

func addXDSFlags(fs *flag.FlagSet, o *xdsOptions) {
	fs.StringVar(&o.configType, "config-type", configTypeFile,
		"where rules come from: FILE (--config) or GRPC_XDS_SOTW (an xDS management server, --config-grpc-xds-server-url)")
	fs.BoolVar(&o.forceStart, "force-start-without-initial-config", false,
		"GRPC_XDS_SOTW: serve (and pass /healthcheck) before the first rules arrive, answering requests with an error until then; false waits for them before listening")
	fs.StringVar(&o.nodeID, "config-grpc-xds-node-id", "default", "GRPC_XDS_SOTW: node id sent to the xDS server, which picks the snapshot by it")
	fs.StringVar(&o.nodeMetadata, "config-grpc-xds-node-metadata", "",
		"GRPC_XDS_SOTW: node metadata sent to the xDS server, as key=value,key2=value2")
	fs.StringVar(&o.serverURL, "config-grpc-xds-server-url", "localhost:18000", "GRPC_XDS_SOTW: the xDS management server, host:port")
	fs.StringVar(&o.headers, "config-grpc-xds-client-additional-headers", "",
		"GRPC_XDS_SOTW: headers (gRPC metadata) sent to the xDS server, as name:value,name2:value2")
	fs.BoolVar(&o.useTLS, "config-grpc-xds-server-use-tls", false, "GRPC_XDS_SOTW: connect to the xDS server over TLS")
	fs.StringVar(&o.certFile, "config-grpc-xds-client-tls-cert", "", "GRPC_XDS_SOTW with TLS: client certificate file (PEM) for mTLS")
	fs.StringVar(&o.keyFile, "config-grpc-xds-client-tls-key", "", "GRPC_XDS_SOTW with TLS: client key file (PEM) for mTLS")
	fs.StringVar(&o.caFile, "config-grpc-xds-server-tls-cacert", "",
		"GRPC_XDS_SOTW with TLS: CA file (PEM) that verifies the xDS server (empty: the system's CAs)")
	fs.StringVar(&o.serverSAN, "config-grpc-xds-server-tls-san", "",
		"GRPC_XDS_SOTW with TLS: name the xDS server's certificate must carry (empty: the host of the server URL)")
	fs.DurationVar(&o.backoff.Initial, "xds-client-backoff-initial-interval", xds.DefaultBackoffInitial,
		"GRPC_XDS_SOTW: wait before reconnecting after the stream to the xDS server ended")
	fs.DurationVar(&o.backoff.Max, "xds-client-backoff-max-interval", xds.DefaultBackoffMax, "GRPC_XDS_SOTW: longest wait before reconnecting")
	fs.Float64Var(&o.backoff.Factor, "xds-client-backoff-random-factor", xds.DefaultBackoffFactor,
		"GRPC_XDS_SOTW: factor applied to the reconnect wait at each retry, as in envoyproxy/ratelimit (at or below 1 the wait stays at the initial interval)")
	fs.BoolVar(&o.backoff.Jitter, "xds-client-backoff-jitter", true,
		"GRPC_XDS_SOTW: draw each reconnect wait at random between the initial interval and its computed value")
	fs.DurationVar(&o.connectRetry, "config-grpc-xds-server-connect-retry-interval", xds.DefaultConnectRetry,
		"GRPC_XDS_SOTW: wait, give or take half, before a new attempt when the xDS server cannot be reached")
	fs.IntVar(&o.maxMsgSize, "xds-client-max-msg-size-in-bytes", 0,
		"GRPC_XDS_SOTW: largest response accepted from the xDS server, in bytes (0: gRPC's 4 MiB)")
}

// enabled reports whether rules come from xDS.
func (o *xdsOptions) enabled() bool { return strings.EqualFold(o.configType, configTypeXDS) }

func (o *xdsOptions) validate() error {
	if !o.enabled() && !strings.EqualFold(o.configType, configTypeFile) {
		return fmt.Errorf("--config-type (CONFIG_TYPE): %q is neither %s nor %s", o.configType, configTypeFile, configTypeXDS)
	}
	if !o.enabled() {
		return nil
	}
	if strings.TrimSpace(o.serverURL) == "" {
		return errors.New("--config-grpc-xds-server-url (CONFIG_GRPC_XDS_SERVER_URL) is required with GRPC_XDS_SOTW")
	}
	if _, err := parseXDSHeaders(o.headers); err != nil {
		return fmt.Errorf("--config-grpc-xds-client-additional-headers (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS): %w", err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--xds-client-backoff-initial-interval (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL)", o.backoff.Initial},
		{"--xds-client-backoff-max-interval (XDS_CLIENT_BACKOFF_MAX_INTERVAL)", o.backoff.Max},
		{"--config-grpc-xds-server-connect-retry-interval (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL)", o.connectRetry},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive", d.name)
		}
	}
	if !(o.backoff.Factor > 0) {
		return errors.New("--xds-client-backoff-random-factor (XDS_CLIENT_BACKOFF_RANDOM_FACTOR) must be positive")
	}
	if o.maxMsgSize < 0 {
		return errors.New("--xds-client-max-msg-size-in-bytes (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES) must not be negative")
	}
	if t := o.tls(); t != nil {
		// Read once now, so that a wrong path stops the start; every
		// connection reads the files again.
		if _, err := t.Config(); err != nil {
			return fmt.Errorf("xDS TLS (CONFIG_GRPC_XDS_CLIENT_TLS_CERT, CONFIG_GRPC_XDS_CLIENT_TLS_KEY, CONFIG_GRPC_XDS_SERVER_TLS_CACERT): %w", err)
		}
	}
	return nil
}

// tls returns the TLS files, or nil for plaintext.
func (o *xdsOptions) tls() *xds.TLS {
	if !o.useTLS {
		return nil
	}
	return &xds.TLS{CertFile: o.certFile, KeyFile: o.keyFile, CAFile: o.caFile, ServerName: o.serverSAN}
}

// client returns the xDS client's options; validate has passed. It also
// returns the node metadata entries that it ignores.
func (o *xdsOptions) client() (xds.Options, []string) {
	md, ignored := parseNodeMetadata(o.nodeMetadata)
	headers, _ := parseXDSHeaders(o.headers)
	return xds.Options{
		ServerURL:        o.serverURL,
		TypeURL:          resource.RateLimitConfigType,
		NodeID:           o.nodeID,
		NodeMetadata:     md,
		UserAgentName:    "fastlimit",
		UserAgentVersion: Version,
		Headers:          headers,
		TLS:              o.tls(),
		Backoff:          o.backoff,
		ConnectRetry:     o.connectRetry,
		MaxRecvMsgSize:   o.maxMsgSize,
	}, ignored
}

// parseNodeMetadata reads key=value,key2=value2 as the reference does: an
// entry without '=' is ignored (and returned), and a value may hold '='.
func parseNodeMetadata(s string) (md map[string]string, ignored []string) {
	md = map[string]string{}
	if s == "" {
		return md, nil
	}
	for _, e := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			ignored = append(ignored, e)
			continue
		}
		md[k] = v
	}
	return md, ignored
}

// parseXDSHeaders reads name:value,name2:value2, the reference's format.
// A value may hold ':' (the reference refuses that); an entry without ':'
// or without a name is an error.
func parseXDSHeaders(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	h := map[string]string{}
	for _, e := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(e, ":")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not name:value", e)
		}
		if strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
			return nil, fmt.Errorf("%q is not a valid header name", k)
		}
		h[k] = v
	}
	return h, nil
}

// openXDS starts the xDS client. Without --force-start-without-initial-config
// it waits until a first snapshot has been applied (bad ones are NACKed
// and waited past), or until ctx ends; with it, it returns at once and
// requests are answered with an error until rules arrive.
func (s *server) openXDS(ctx context.Context) error {
	opts, ignored := s.opts.xds.client()
	log := s.log.Named("xds")
	if len(ignored) > 0 {
		log.Warn("CONFIG_GRPC_XDS_NODE_METADATA: entries without '=' are ignored", zap.Strings("entries", ignored))
	}
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
	s.xds = startXDS(context.WithoutCancel(ctx), opts, apply, log)
	log.Info("rules come from an xDS server", zap.String("server", opts.ServerURL), zap.String("node", opts.NodeID),
		zap.Bool("tls", opts.TLS != nil), zap.Bool("force_start", s.opts.xds.forceStart))
	if s.opts.xds.forceStart {
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
	cancel context.CancelFunc
	done   chan struct{}
}

func startXDS(ctx context.Context, opts xds.Options, apply xds.Apply, log *zap.Logger) *xdsRules {
	ctx, cancel := context.WithCancel(ctx)
	x := &xdsRules{client: xds.New(opts, apply, log), cancel: cancel, done: make(chan struct{})}
	x.client.Open(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer close(x.done)
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: rules come from the xDS server; nothing to reload")
			}
		}
	}()
	return x
}

// Close stops the client; an update in progress finishes first. It is
// idempotent.
func (x *xdsRules) Close() {
	x.cancel()
	<-x.done
	x.client.Close()
}

// applyXDS validates the RateLimitConfig resources of a snapshot and swaps
// them in, as a reload of files does; its error NACKs the snapshot.
func (s *server) applyXDS(res []*anypb.Any) error {
	return s.rules.update(causeXDS, func() (bool, error) {
		return s.rules.swap(func() (*config.Loaded, error) {
			cfgs := make([]*rlsconf.RateLimitConfig, len(res))
			for i, a := range res {
				cfgs[i] = &rlsconf.RateLimitConfig{}
				if err := a.UnmarshalTo(cfgs[i]); err != nil {
					return nil, fmt.Errorf("resource #%d (%s): %w", i, a.GetTypeUrl(), err)
				}
			}
			return config.FromXDS(cfgs)
		})
	})
}
