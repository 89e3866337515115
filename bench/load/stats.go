package load

import (
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"sort"
	"strings"
	"time"
)

// Histogram layout: values below subCount nanoseconds get a bucket each;
// every power of two above is cut into subCount/2 equal buckets, so a
// bucket is never wider than 1/64 (1.6%) of the values it holds. Values
// past maxTracked (about 18 minutes) are clamped to it; max is exact.
const (
	subBits    = 7
	subCount   = 1 << subBits // 128
	halfCount  = subCount / 2
	trackBits  = 40
	maxTracked = int64(1)<<trackBits - 1
	nBuckets   = subCount + (trackBits-subBits)*halfCount
)

// histogram records durations in bounded memory (18 KB), like an HDR
// histogram with two significant digits. It is not safe for concurrent
// use: each caller owns one, and they are merged at the end.
type histogram struct {
	counts [nBuckets]uint64
	n      uint64
	sum    int64 // ns
	max    int64 // ns
}

// bucketOf returns the bucket of v ns (0 <= v <= maxTracked).
func bucketOf(v int64) int {
	if v < subCount {
		return int(v)
	}
	// v>>shift lies in [halfCount, subCount).
	shift := bits.Len64(uint64(v)) - subBits
	return subCount + (shift-1)*halfCount + int(v>>shift) - halfCount
}

// bucketHigh returns the largest value that falls in bucket i.
func bucketHigh(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	j := i - subCount
	shift := j/halfCount + 1
	top := int64(j%halfCount + halfCount)
	return (top+1)<<shift - 1
}

func (h *histogram) record(d time.Duration) {
	v := min(max(int64(d), 0), maxTracked)
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += int64(d)
	h.max = max(h.max, int64(d))
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the value at quantile q (0 < q <= 1): the top of the
// bucket holding the ceil(q*n)-th smallest value, at most max; the exact
// max for the largest value.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	if rank == h.n {
		return time.Duration(h.max)
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), h.max))
		}
	}
	return time.Duration(h.max)
}

func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / int64(h.n))
}

// maxErrorCodes bounds the distinct error codes kept.
const maxErrorCodes = 32

// stats are one caller's counts, or the merged counts of all.
type stats struct {
	hist     *histogram
	ok, over int64
	errors   int64
	codes    map[string]int64 // errors by gRPC code
	firstErr string
}

func newStats() *stats { return &stats{hist: &histogram{}, codes: map[string]int64{}} }

func (s *stats) reset() { *s = *newStats() }

func (s *stats) fail(code string, err error) {
	s.errors++
	if _, ok := s.codes[code]; ok || len(s.codes) < maxErrorCodes {
		s.codes[code]++
	}
	if s.firstErr == "" {
		s.firstErr = err.Error()
	}
}

func (s *stats) merge(o *stats) {
	s.hist.merge(o.hist)
	s.ok += o.ok
	s.over += o.over
	s.errors += o.errors
	for k, v := range o.codes {
		s.codes[k] += v
	}
	if s.firstErr == "" {
		s.firstErr = o.firstErr
	}
}

// Latency is a latency summary in microseconds.
type Latency struct {
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Max  float64 `json:"max_us"`
	Mean float64 `json:"mean_us"`
}

// Report is the outcome of one phase. Decisions are OK and OVER_LIMIT
// answers; Errors are failed calls, by gRPC code in ErrorCodes.
type Report struct {
	Addr        string   `json:"addr"`
	Domain      string   `json:"domain"`
	Keys        []string `json:"keys"`
	Descriptors int      `json:"descriptors"`
	Callers     int      `json:"callers"` // closed loop
	Conns       int      `json:"conns"`
	Keyspace    int64    `json:"keyspace"`
	Pick        string   `json:"pick"`

	Seconds           float64 `json:"seconds"`
	Requests          int64   `json:"requests"`
	OK                int64   `json:"ok"`
	Over              int64   `json:"over_limit"`
	Errors            int64   `json:"errors"`
	DecisionsPerSec   float64 `json:"decisions_per_sec"`
	DescriptorsPerSec float64 `json:"descriptors_per_sec"`
	Latency           Latency `json:"latency"`
	// CPUSeconds is the CPU time loadgen itself used in the measured
	// phase: on a shared machine, what it took from the server.
	CPUSeconds float64          `json:"loadgen_cpu_seconds"`
	ErrorCodes map[string]int64 `json:"error_codes,omitempty"`
	FirstError string           `json:"first_error,omitempty"`
	// Open describes an open-loop phase (nil: closed loop); Latency then
	// runs from each request's intended send time.
	Open *OpenLoop `json:"open_loop,omitempty"`
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func newReport(c *Config, s *stats, took, cpu time.Duration) *Report {
	r := &Report{
		Addr: c.Addr, Domain: c.Domain, Keys: c.EntryKeys, Descriptors: c.Descriptors,
		Callers: c.Callers, Conns: c.Conns, Keyspace: c.Keys, Pick: c.Pick,
		Seconds:  took.Seconds(),
		Requests: s.ok + s.over + s.errors, OK: s.ok, Over: s.over, Errors: s.errors,
		Latency: Latency{
			P50: us(s.hist.quantile(0.50)), P90: us(s.hist.quantile(0.90)),
			P99: us(s.hist.quantile(0.99)), P999: us(s.hist.quantile(0.999)),
			Max: us(time.Duration(s.hist.max)), Mean: us(s.hist.mean()),
		},
		CPUSeconds: cpu.Seconds(),
		FirstError: s.firstErr,
	}
	if len(s.codes) > 0 {
		r.ErrorCodes = s.codes
	}
	if took > 0 {
		r.DecisionsPerSec = float64(s.ok+s.over) / took.Seconds()
		r.DescriptorsPerSec = r.DecisionsPerSec * float64(c.Descriptors)
	}
	return r
}

// Decisions returns the OK and OVER_LIMIT answers.
func (r *Report) Decisions() int64 { return r.OK + r.Over }

// WriteJSON writes r as one JSON object and a newline.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	return enc.Encode(r)
}

// WriteText writes r for people, one line per aspect.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "target     %s domain=%s key=%s descriptors=%d\n", r.Addr, r.Domain, strings.Join(r.Keys, ","), r.Descriptors)
	if o := r.Open; o != nil {
		fmt.Fprintf(&b, "load       open loop: %.0f requests/s meant (Poisson), %d sent by up to %d in flight over %d conns, %d identifiers (%s)\n",
			o.Rate, o.Arrivals, o.Senders, r.Conns, r.Keyspace, r.Pick)
		fmt.Fprintf(&b, "send lag   p50 %s  p99 %s  max %s after the intended times (counted in latency)\n",
			fmtUS(o.Lag.P50), fmtUS(o.Lag.P99), fmtUS(o.Lag.Max))
	} else {
		fmt.Fprintf(&b, "load       %d callers over %d conns, %d identifiers (%s)\n", r.Callers, r.Conns, r.Keyspace, r.Pick)
	}
	fmt.Fprintf(&b, "requests   %d in %.2fs: %.0f decisions/s (%.0f descriptors/s)\n", r.Requests, r.Seconds, r.DecisionsPerSec, r.DescriptorsPerSec)
	fmt.Fprintf(&b, "answers    OK %d, OVER_LIMIT %d, errors %d\n", r.OK, r.Over, r.Errors)
	fmt.Fprintf(&b, "loadgen    %.2f CPU seconds\n", r.CPUSeconds)
	l := r.Latency
	fmt.Fprintf(&b, "latency    p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s\n",
		fmtUS(l.P50), fmtUS(l.P90), fmtUS(l.P99), fmtUS(l.P999), fmtUS(l.Max), fmtUS(l.Mean))
	if r.Errors > 0 {
		codes := make([]string, 0, len(r.ErrorCodes))
		for k, v := range r.ErrorCodes {
			codes = append(codes, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(codes)
		fmt.Fprintf(&b, "errors     %s; first: %s\n", strings.Join(codes, ", "), r.FirstError)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtUS formats microseconds as µs below 1 ms, else as ms.
func fmtUS(v float64) string {
	if v < 1000 {
		return fmt.Sprintf("%.0fµs", v)
	}
	return fmt.Sprintf("%.2fms", v/1000)
}
