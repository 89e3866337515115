package refstats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fastlimit/fastlimit/internal/edge/connlimit"
	"github.com/fastlimit/fastlimit/internal/edge/httpserver"
	"github.com/fastlimit/fastlimit/internal/observe/statsd"
	"github.com/fastlimit/fastlimit/internal/observe/statsmap"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// Options select where envoyproxy/ratelimit's stats go. Each has a flag
// whose environment twin is the reference's variable of the same meaning.
type Options struct {
	Prometheus           bool   // USE_PROMETHEUS
	PrometheusAddr       string // PROMETHEUS_ADDR
	PrometheusPath       string // PROMETHEUS_PATH
	PrometheusMapperYAML string // PROMETHEUS_MAPPER_YAML
	// PrometheusResponseTimeAsMilliseconds keeps the built-in mapping's response time in
	// milliseconds (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS); by default
	// it is scaled to seconds, as upstream's mapping does since #1104.
	// A mapping file decides for itself.
	PrometheusResponseTimeAsMilliseconds bool
	Statsd                               bool   // USE_STATSD
	DogStatsd                            bool   // USE_DOG_STATSD
	StatsdHost                           string // STATSD_HOST
	StatsdPort                           int    // STATSD_PORT
	StatsdProtocol                       string // tcp (as gostats) or udp
	StatsdFlushInterval                  time.Duration
	StatsdTags                           string // EXTRA_TAGS
	StatsOff                             bool   // DISABLE_STATS
	DogStatsdMogrifiers                  string // USE_DOG_STATSD_MOGRIFIERS
	// NearLimitRatio is the share of a limit past which hits are near it.
	NearLimitRatio float64
	// Getenv reads DOG_STATSD_MOGRIFIER_<NAME>_{PATTERN,NAME,TAGS}, whose
	// names depend on USE_DOG_STATSD_MOGRIFIERS; nil: os.Getenv.
	Getenv func(string) string
	// HTTP bounds the PROMETHEUS_ADDR listener; zero fields take
	// httpserver.Defaults'.
	HTTP httpserver.Options
}

// Reporter is envoyproxy/ratelimit's stats: a counting observer, and its
// outputs, a Prometheus listener and a statsd client. New starts nothing;
// Open starts them; Close stops them. A nil *Reporter (the default:
// neither output on) does nothing.
type Reporter struct {
	opts   Options
	stats  *Stats
	gather prometheus.Gatherer // the reference's series and the server's own
	client *statsd.Client
	log    *zap.Logger

	srv    *httpserver.Server
	cancel context.CancelFunc
	done   chan struct{}
}

// New builds the outputs o asks for, nil when there are none; main is the
// server's own registry, served beside the reference's series and given
// the counters of Stats' own trouble.
func New(o Options, l *limiter.Limiter, main *prometheus.Registry, log *zap.Logger) (*Reporter, error) {
	if o.StatsOff {
		if o.Prometheus || o.Statsd || o.DogStatsd {
			log.Info("DISABLE_STATS is set: envoyproxy/ratelimit's stats are off (fastlimit_* stay on the admin listener)")
		}
		return nil, nil
	}
	if !o.Prometheus && !o.Statsd && !o.DogStatsd {
		if o.PrometheusMapperYAML != "" {
			log.Warn("PROMETHEUS_MAPPER_YAML has no effect without USE_PROMETHEUS=true")
		}
		return nil, nil
	}
	if o.Statsd && o.DogStatsd {
		return nil, errors.New("USE_STATSD (--statsd) and USE_DOG_STATSD (--dogstatsd) both send to STATSD_HOST:STATSD_PORT: choose one")
	}
	stats, err := newStats(l, o.NearLimitRatio, defaultMaxDynamicKeys, main)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m := &Reporter{opts: o, stats: stats, log: log}
	if o.Prometheus {
		if err := m.setupPrometheus(main); err != nil {
			return nil, err
		}
	} else if o.PrometheusMapperYAML != "" {
		log.Warn("PROMETHEUS_MAPPER_YAML has no effect without USE_PROMETHEUS=true")
	}
	if o.Statsd || o.DogStatsd {
		if err := m.setupStatsd(); err != nil {
			return nil, err
		}
	} else if o.StatsdTags != "" {
		log.Warn("EXTRA_TAGS applies to statsd stats only: the Prometheus series do not carry them")
	}
	return m, nil
}

func (m *Reporter) setupPrometheus(main *prometheus.Registry) error {
	o := m.opts
	if !strings.HasPrefix(o.PrometheusPath, "/") {
		return fmt.Errorf("PROMETHEUS_PATH (--prometheus-path) %q must start with '/'", o.PrometheusPath)
	}
	mapper := statsmap.Default()
	if !o.PrometheusResponseTimeAsMilliseconds {
		mapper = statsmap.DefaultSeconds()
	}
	if o.PrometheusMapperYAML != "" {
		if o.PrometheusResponseTimeAsMilliseconds {
			m.log.Warn("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS has no effect with PROMETHEUS_MAPPER_YAML: the file's scale decides")
		}
		data, err := os.ReadFile(o.PrometheusMapperYAML)
		if err != nil {
			return fmt.Errorf("PROMETHEUS_MAPPER_YAML (--prometheus-mapper-yaml): %w", err)
		}
		var warns []string
		if mapper, warns, err = statsmap.Parse(data); err != nil {
			return fmt.Errorf("PROMETHEUS_MAPPER_YAML (--prometheus-mapper-yaml) %s: %w", o.PrometheusMapperYAML, err)
		}
		for _, w := range warns {
			m.log.Warn("PROMETHEUS_MAPPER_YAML: "+w, zap.String("file", o.PrometheusMapperYAML))
		}
	}
	reg := prometheus.NewRegistry()
	coll, err := newCollector(m.stats.store, mapper, main)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := reg.Register(coll); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	m.stats.prom = coll
	m.gather = prometheus.Gatherers{reg, main}
	return nil
}

func (m *Reporter) setupStatsd() error {
	o := m.opts
	tags, err := statsd.ParseTags(o.StatsdTags)
	if err != nil {
		return fmt.Errorf("EXTRA_TAGS (--statsd-tags): %w", err)
	}
	if o.StatsdFlushInterval <= 0 {
		return fmt.Errorf("STATS_FLUSH_INTERVAL (--statsd-flush-interval) must be positive")
	}
	so := statsd.Options{
		Network: o.StatsdProtocol, Addr: net.JoinHostPort(o.StatsdHost, strconv.Itoa(o.StatsdPort)), Tags: tags,
	}
	if o.DogStatsd {
		so.Network, so.Format = "udp", statsd.DogStatsD
		if so.Mogrifiers, err = mogrifiers(o.DogStatsdMogrifiers, o.Getenv); err != nil {
			return err
		}
	} else if o.DogStatsdMogrifiers != "" {
		m.log.Warn("USE_DOG_STATSD_MOGRIFIERS has no effect without USE_DOG_STATSD=true")
	}
	if m.client, err = statsd.NewClient(m.stats.store, so, m.log.Named("statsd")); err != nil {
		return fmt.Errorf("STATSD_HOST, STATSD_PORT, STATSD_PROTOCOL: %w", err)
	}
	m.stats.timers = true
	return nil
}

// mogrifiers reads the DogStatsD mogrifiers that list names, each from
// DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS, as the reference
// does.
func mogrifiers(list string, getenv func(string) string) ([]statsd.Mogrifier, error) {
	if list == "" {
		return nil, nil
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	var out []statsd.Mogrifier
	for _, name := range strings.Split(list, ",") {
		env := "DOG_STATSD_MOGRIFIER_" + name + "_"
		pattern, to := getenv(env+"PATTERN"), getenv(env+"NAME")
		if pattern == "" {
			return nil, fmt.Errorf("USE_DOG_STATSD_MOGRIFIERS: %sPATTERN is not set", env)
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			return nil, fmt.Errorf("%sPATTERN: %w", env, err)
		}
		if to == "" {
			return nil, fmt.Errorf("USE_DOG_STATSD_MOGRIFIERS: %sNAME is not set", env)
		}
		tags, err := statsd.ParseTags(getenv(env + "TAGS"))
		if err != nil {
			return nil, fmt.Errorf("%sTAGS: %w", env, err)
		}
		for _, t := range tags {
			if t.Value == "" {
				return nil, fmt.Errorf("%sTAGS: tag %s has no value", env, t.Key)
			}
		}
		out = append(out, statsd.Mogrifier{Pattern: re, Name: to, Tags: tags})
	}
	return out, nil
}

// Stats is the counting observer of decisions and rules loads, nil when m
// is.
func (m *Reporter) Stats() *Stats {
	if m == nil {
		return nil
	}
	return m.stats
}

// ServerOptions count every unary call, as the reference's server does.
func (m *Reporter) ServerOptions() []grpc.ServerOption {
	if m == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(m.stats.interceptor)}
}

// Open binds PROMETHEUS_ADDR and starts the statsd client. ctx bounds
// neither; Close stops both.
func (m *Reporter) Open(ctx context.Context) error {
	if m == nil {
		return nil
	}
	if m.gather != nil {
		mux := http.NewServeMux()
		mux.Handle(m.opts.PrometheusPath, promhttp.HandlerFor(m.gather, promhttp.HandlerOpts{
			ErrorLog: zap.NewStdLog(m.log), ErrorHandling: promhttp.ContinueOnError,
		}))
		srv, err := httpserver.Listen(m.opts.PrometheusAddr, mux, m.opts.HTTP)
		if err != nil {
			return fmt.Errorf("listen PROMETHEUS_ADDR (--prometheus-addr) %s: %w", m.opts.PrometheusAddr, err)
		}
		m.srv = srv
		go func() {
			if err := srv.Serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				m.log.Error("prometheus listener stopped", zap.Error(err))
			}
		}()
		m.log.Info("serving envoyproxy/ratelimit's metrics", zap.String("addr", srv.Addr().String()), zap.String("path", m.opts.PrometheusPath))
	}
	if m.client != nil {
		var cctx context.Context
		cctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
		m.done = make(chan struct{})
		go func() {
			defer close(m.done)
			m.client.Run(cctx, m.opts.StatsdFlushInterval)
		}()
		m.log.Info("sending envoyproxy/ratelimit's stats", zap.String("addr", net.JoinHostPort(m.opts.StatsdHost, strconv.Itoa(m.opts.StatsdPort))),
			zap.Bool("dogstatsd", m.opts.DogStatsd), zap.Duration("every", m.opts.StatsdFlushInterval))
	}
	return nil
}

// Addr is the bound PROMETHEUS_ADDR, "" without one.
func (m *Reporter) Addr() string {
	if m == nil || m.srv == nil {
		return ""
	}
	return m.srv.Addr().String()
}

// ListenerStats are the PROMETHEUS_ADDR listener's connection counts;
// false without one.
func (m *Reporter) ListenerStats() (connlimit.Stats, bool) {
	if m == nil || m.srv == nil {
		return connlimit.Stats{}, false
	}
	return m.srv.Stats(), true
}

// Close stops the listener and the statsd client, which flushes once
// more; each step is bounded by timeout.
func (m *Reporter) Close(ctx context.Context, timeout time.Duration) error {
	if m == nil {
		return nil
	}
	var errs []error
	if m.srv != nil {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := m.srv.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("prometheus listener: %w", err))
		}
	}
	if m.cancel != nil {
		m.cancel()
		select {
		case <-m.done:
		case <-time.After(timeout):
			errs = append(errs, errors.New("statsd: last flush did not finish in time"))
		}
		_ = m.client.Close()
	}
	return errors.Join(errs...)
}
