package metrics

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
)

// Remote collects another process's metrics as this registry's own: at
// each scrape it reads URL (the Prometheus text format) and yields the
// families whose names start with Prefix. --rlqs-process serves RLQS's
// metrics this way, from its child, on the parent's /metrics. It is an
// unchecked collector: what it yields is known only when read.
type Remote struct {
	URL    string
	Prefix string
	// Timeout bounds one read (0: 2 s); an unanswered read yields nothing
	// and logs at debug, so that a child starting again never fails the
	// parent's scrape.
	Timeout time.Duration
	Client  *http.Client // nil: http.DefaultClient
	Log     *zap.Logger
}

// Describe yields nothing: Remote is unchecked.
func (r *Remote) Describe(chan<- *prometheus.Desc) {}

// Collect reads the remote families and yields their metrics.
func (r *Remote) Collect(ch chan<- prometheus.Metric) {
	fams, err := r.read()
	if err != nil {
		if r.Log != nil {
			r.Log.Debug("remote metrics unread", zap.String("url", r.URL), zap.Error(err))
		}
		return
	}
	for _, f := range fams {
		desc := prometheus.NewDesc(f.GetName(), f.GetHelp(), nil, nil)
		for _, m := range f.GetMetric() {
			ch <- remoteMetric{desc: desc, m: m}
		}
	}
}

// read fetches and parses the remote families whose names have Prefix,
// in name order.
func (r *Remote) read() ([]*dto.MetricFamily, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	client := r.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", r.URL, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	all, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.URL, err)
	}
	var out []*dto.MetricFamily
	for name, f := range all {
		if strings.HasPrefix(name, r.Prefix) {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

// remoteMetric is one metric read from another process, yielded as read.
type remoteMetric struct {
	desc *prometheus.Desc
	m    *dto.Metric
}

func (r remoteMetric) Desc() *prometheus.Desc { return r.desc }

func (r remoteMetric) Write(out *dto.Metric) error {
	out.Label = r.m.Label
	out.Counter, out.Gauge, out.Untyped = r.m.Counter, r.m.Gauge, r.m.Untyped
	out.Histogram, out.Summary = r.m.Histogram, r.m.Summary
	return nil
}
