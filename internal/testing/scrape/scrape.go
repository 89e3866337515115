// Package scrape reads the HTTP endpoints of a server under test: the
// status and body of a GET, the series of a Prometheus text page, and a
// registry's families linted as Prometheus names them.
package scrape

import (
	"bufio"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// client opens a connection per request: an idle keep-alive connection
// would hold a goroutine of the server under test.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}

// Get returns the status and body of a GET of url. A request that fails
// fails t.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$`)

// Series reads a Prometheus text page into "name{labels}" -> value,
// labels as the page writes them.
func Series(t testing.TB, page string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(page))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sampleRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out[m[1]+m[2]] = v
	}
	return out
}

// Value returns the value of series on page, `name{labels}` as the page
// writes it, or 0 when it does not appear.
func Value(t testing.TB, page, series string) float64 {
	t.Helper()
	return Series(t, page)[series]
}

// Linted gathers g's families and fails t on any that promlint, the
// Prometheus naming linter, objects to.
func Linted(t testing.TB, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	return mfs
}
