package main

import (
	"context"
	"errors"
	"flag"
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

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/statsd"
	"github.com/fastlimit/fastlimit/pkg/statsmap"
)

// refStatsOptions select where envoyproxy/ratelimit's stats go. Each flag's
// environment twin is the reference's variable of the same meaning.
type refStatsOptions struct {
	usePrometheus  bool
	promAddr       string
	promPath       string
	mapperYAML     string
	useStatsd      bool
	useDogStatsd   bool
	statsdHost     string
	statsdPort     int
	statsdProtocol string
	flushInterval  time.Duration
	extraTags      string
	disableStats   bool
	mogrifiers     string
	// getenv reads DOG_STATSD_MOGRIFIER_<NAME>_{PATTERN,NAME,TAGS}, whose
	// names depend on USE_DOG_STATSD_MOGRIFIERS.
	getenv func(string) string
}

func addRefStatsFlags(fs *flag.FlagSet, o *refStatsOptions) {
	fs.BoolVar(&o.usePrometheus, "use-prometheus", false,
		"serve envoyproxy/ratelimit's metrics (ratelimit_service_*) and FastLimit's own on --prometheus-addr")
	fs.StringVar(&o.promAddr, "prometheus-addr", ":9090", "listen address of --use-prometheus")
	fs.StringVar(&o.promPath, "prometheus-path", "/metrics", "HTTP path of --use-prometheus")
	fs.StringVar(&o.mapperYAML, "prometheus-mapper-yaml", "",
		"statsd_exporter mapping file from envoyproxy/ratelimit's stat names to Prometheus series (default: its built-in mapping)")
	fs.BoolVar(&o.useStatsd, "use-statsd", false,
		"send envoyproxy/ratelimit's stats (counters) to --statsd-host:--statsd-port every --stats-flush-interval")
	fs.BoolVar(&o.useDogStatsd, "use-dog-statsd", false,
		"send envoyproxy/ratelimit's stats (counters) as DogStatsD over UDP to --statsd-host:--statsd-port")
	fs.StringVar(&o.statsdHost, "statsd-host", "localhost", "statsd host of --use-statsd and --use-dog-statsd")
	fs.IntVar(&o.statsdPort, "statsd-port", 8125, "statsd port of --use-statsd and --use-dog-statsd")
	fs.StringVar(&o.statsdProtocol, "statsd-protocol", "tcp", "protocol of --use-statsd: tcp (as gostats) or udp")
	fs.DurationVar(&o.flushInterval, "stats-flush-interval", 10*time.Second, "how often --use-statsd and --use-dog-statsd send")
	fs.StringVar(&o.extraTags, "extra-tags", "", "tags k1:v1,k2:v2 added to every statsd stat")
	fs.BoolVar(&o.disableStats, "disable-stats", false,
		"turn envoyproxy/ratelimit's stats off whatever --use-prometheus and --use-statsd say (fastlimit_* stay on the admin listener)")
	fs.StringVar(&o.mogrifiers, "use-dog-statsd-mogrifiers", "",
		"DogStatsD mogrifiers NAME1,NAME2, each set by DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS")
}

// refMetrics are envoyproxy/ratelimit's stats: a counting observer, and
// its outputs, a Prometheus listener and a statsd client. newRefMetrics
// starts nothing; open starts them; close stops them. A nil *refMetrics
// (the default: neither output on) does nothing.
type refMetrics struct {
	opts   refStatsOptions
	stats  *refStats
	gather prometheus.Gatherer // the reference's series and the server's own
	client *statsd.Client
	log    *zap.Logger

	srv    *http.Server
	lis    net.Listener
	cancel context.CancelFunc
	done   chan struct{}
}

// newRefMetrics builds the outputs o asks for; main is the server's own
// registry, served beside the reference's series and given the counters
// of refStats' own trouble.
func newRefMetrics(o refStatsOptions, l *limiter.Limiter, nearRatio float64, main *prometheus.Registry, log *zap.Logger) (*refMetrics, error) {
	if o.disableStats {
		if o.usePrometheus || o.useStatsd || o.useDogStatsd {
			log.Info("DISABLE_STATS is set: envoyproxy/ratelimit's stats are off (fastlimit_* stay on the admin listener)")
		}
		return nil, nil
	}
	if !o.usePrometheus && !o.useStatsd && !o.useDogStatsd {
		if o.mapperYAML != "" {
			log.Warn("PROMETHEUS_MAPPER_YAML has no effect without USE_PROMETHEUS=true")
		}
		return nil, nil
	}
	if o.useStatsd && o.useDogStatsd {
		return nil, errors.New("USE_STATSD (--use-statsd) and USE_DOG_STATSD (--use-dog-statsd) both send to STATSD_HOST:STATSD_PORT: choose one")
	}
	stats, err := newRefStats(l, nearRatio, defaultMaxDynamicKeys, main)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m := &refMetrics{opts: o, stats: stats, log: log}
	if o.usePrometheus {
		if err := m.setupPrometheus(main); err != nil {
			return nil, err
		}
	} else if o.mapperYAML != "" {
		log.Warn("PROMETHEUS_MAPPER_YAML has no effect without USE_PROMETHEUS=true")
	}
	if o.useStatsd || o.useDogStatsd {
		if err := m.setupStatsd(); err != nil {
			return nil, err
		}
	} else if o.extraTags != "" {
		log.Warn("EXTRA_TAGS applies to statsd stats only: the Prometheus series do not carry them")
	}
	return m, nil
}

func (m *refMetrics) setupPrometheus(main *prometheus.Registry) error {
	o := m.opts
	if !strings.HasPrefix(o.promPath, "/") {
		return fmt.Errorf("PROMETHEUS_PATH (--prometheus-path) %q must start with '/'", o.promPath)
	}
	mapper := statsmap.Default()
	if o.mapperYAML != "" {
		data, err := os.ReadFile(o.mapperYAML)
		if err != nil {
			return fmt.Errorf("PROMETHEUS_MAPPER_YAML (--prometheus-mapper-yaml): %w", err)
		}
		var warns []string
		if mapper, warns, err = statsmap.Parse(data); err != nil {
			return fmt.Errorf("PROMETHEUS_MAPPER_YAML (--prometheus-mapper-yaml) %s: %w", o.mapperYAML, err)
		}
		for _, w := range warns {
			m.log.Warn("PROMETHEUS_MAPPER_YAML: "+w, zap.String("file", o.mapperYAML))
		}
	}
	reg := prometheus.NewRegistry()
	coll, err := newRefCollector(m.stats.store, mapper, main)
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

func (m *refMetrics) setupStatsd() error {
	o := m.opts
	tags, err := statsd.ParseTags(o.extraTags)
	if err != nil {
		return fmt.Errorf("EXTRA_TAGS (--extra-tags): %w", err)
	}
	if o.flushInterval <= 0 {
		return fmt.Errorf("STATS_FLUSH_INTERVAL (--stats-flush-interval) must be positive")
	}
	so := statsd.Options{
		Network: o.statsdProtocol, Addr: net.JoinHostPort(o.statsdHost, strconv.Itoa(o.statsdPort)), Tags: tags,
	}
	if o.useDogStatsd {
		so.Network, so.Format = "udp", statsd.DogStatsD
		if so.Mogrifiers, err = mogrifiers(o.mogrifiers, o.getenv); err != nil {
			return err
		}
	} else if o.mogrifiers != "" {
		m.log.Warn("USE_DOG_STATSD_MOGRIFIERS has no effect without USE_DOG_STATSD=true")
	}
	if m.client, err = statsd.NewClient(m.stats.store, so, m.log.Named("statsd")); err != nil {
		return fmt.Errorf("STATSD_HOST, STATSD_PORT, STATSD_PROTOCOL: %w", err)
	}
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

// observer returns base, and refStats beside it when m counts.
func (m *refMetrics) observer(base observer) observer {
	if m == nil {
		return base
	}
	return observers{base, m.stats}
}

// grpcOptions count every unary call, as the reference's server does.
func (m *refMetrics) grpcOptions() []grpc.ServerOption {
	if m == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(m.stats.interceptor)}
}

// loadHook is told of every load of the rules; nil when m is.
func (m *refMetrics) loadHook() func(ok bool) {
	if m == nil {
		return nil
	}
	return m.stats.loadDone
}

// open binds PROMETHEUS_ADDR and starts the statsd client. ctx bounds
// neither; close stops both.
func (m *refMetrics) open(ctx context.Context) error {
	if m == nil {
		return nil
	}
	if m.gather != nil {
		lis, err := net.Listen("tcp", m.opts.promAddr)
		if err != nil {
			return fmt.Errorf("listen PROMETHEUS_ADDR (--prometheus-addr) %s: %w", m.opts.promAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle(m.opts.promPath, promhttp.HandlerFor(m.gather, promhttp.HandlerOpts{
			ErrorLog: zap.NewStdLog(m.log), ErrorHandling: promhttp.ContinueOnError,
		}))
		m.lis, m.srv = lis, &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := m.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				m.log.Error("prometheus listener stopped", zap.Error(err))
			}
		}()
		m.log.Info("serving envoyproxy/ratelimit's metrics", zap.String("addr", lis.Addr().String()), zap.String("path", m.opts.promPath))
	}
	if m.client != nil {
		var cctx context.Context
		cctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
		m.done = make(chan struct{})
		go func() {
			defer close(m.done)
			m.client.Run(cctx, m.opts.flushInterval)
		}()
		m.log.Info("sending envoyproxy/ratelimit's stats", zap.String("addr", net.JoinHostPort(m.opts.statsdHost, strconv.Itoa(m.opts.statsdPort))),
			zap.Bool("dogstatsd", m.opts.useDogStatsd), zap.Duration("every", m.opts.flushInterval))
	}
	return nil
}

// addr is the bound PROMETHEUS_ADDR, "" without one.
func (m *refMetrics) addr() string {
	if m == nil || m.lis == nil {
		return ""
	}
	return m.lis.Addr().String()
}

// close stops the listener and the statsd client, which flushes once
// more; each step is bounded by timeout.
func (m *refMetrics) close(ctx context.Context, timeout time.Duration) error {
	if m == nil {
		return nil
	}
	var errs []error
	if m.srv != nil {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := m.srv.Shutdown(sctx); err != nil {
			_ = m.srv.Close()
			errs = append(errs, fmt.Errorf("prometheus listener shutdown: %w", err))
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
