package quota

import (
	"math"
	"time"
)

// Config tunes the division of a limit; zero fields take DefaultConfig's.
type Config struct {
	Period       time.Duration // the clients' report period
	Headroom     float64       // added to a measured demand, as a fraction
	MinWant      float64       // the least want, a fraction of the even split
	Smoothing    time.Duration // time constant of following a falling demand
	Stale        time.Duration // how long an unheard client counts (3 periods)
	Raise, Lower float64       // changes of a share its assignment ignores (Settle)
	// Earn is the fraction of what it holds a client must use for its
	// denied requests to count as demand; Probe, the fraction of what it
	// holds credited beyond its use when it does not (Client.Report).
	Earn, Probe float64
}

// DefaultConfig is the configuration of the zero Config.
var DefaultConfig = Config{
	Period:    5 * time.Second,
	Headroom:  0.1,
	MinWant:   0.05,
	Smoothing: 5 * time.Second,
	Raise:     0.05,
	Lower:     0.02,
	Earn:      0.5,
	Probe:     0.05,
}

// WithDefaults returns c with its zero fields set.
func (c Config) WithDefaults() Config {
	d := DefaultConfig
	if c.Period > 0 {
		d.Period, d.Smoothing = c.Period, c.Period
	}
	d.Stale = 3 * d.Period
	positive(&d.Headroom, c.Headroom)
	positive(&d.MinWant, c.MinWant)
	positive(&d.Smoothing, c.Smoothing)
	positive(&d.Stale, c.Stale)
	positive(&d.Raise, c.Raise)
	positive(&d.Lower, c.Lower)
	positive(&d.Earn, c.Earn)
	positive(&d.Probe, c.Probe)
	return d
}

func positive[T float64 | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// Limit is a bucket's global limit: Rate requests per second, bursts of Burst.
type Limit struct {
	Rate  float64
	Burst float64
}

// Left is the Rate of a client that left its bucket: it counts toward no
// division, but its Envoy may still hold its Assigned.
const Left = -2

// Demand is one client's demand in a bucket, as replicas publish it.
type Demand struct {
	Replica string
	Client  string
	Rate    float64 // requests per second; negative while not known, Left once gone
	// Assigned is the rate its Envoy may hold: the share last sent, or
	// being sent (docs/rlqs.md, "The ledger").
	Assigned float64
	// Adopted is, in the answer to a Reserve, what it took over.
	Adopted float64
}

// Client is one client's state in a bucket on the replica that serves it.
type Client struct {
	ID     string
	Demand float64 // smoothed, allowed + denied per second, when Known
	Known  bool
	// Server times; LastActive is the last report with requests.
	Joined, LastReport, LastActive time.Time
	// Assigned is the rate the client's Envoy may hold: raised before a
	// raise is sent, lowered once a cut has been sent.
	Assigned float64
	// Hold leaves the client out of the division, keeping what it holds:
	// an Envoy that moved from another stream, whose old value stands for
	// it until the client adopts it.
	Hold bool

	// carry and carryAllowed are the requests, and the allowed ones, of
	// reports too close to measure yet; heldAt is Assigned at the last
	// report that was measured or subscribed (heldSet once there is one).
	carry, carryAllowed uint64
	heldAt              float64
	heldSet             bool
}

// Credit records that the client holds rate already, as an Envoy that
// moved from another stream does: what it is assigned, and what it held
// at its last report (Report's earned demand).
func (c *Client) Credit(rate float64) {
	c.Assigned, c.heldAt, c.heldSet = rate, rate, true
}

// Observe takes a report of n requests, all taken as allowed (Report).
func (c *Client) Observe(n uint64, elapsed time.Duration, now time.Time, cfg *Config) {
	c.Report(n, 0, elapsed, now, cfg)
}

// Report takes a report of allowed and denied requests, timed on the
// server's clock; a first report uses Envoy's elapsed, if a second or
// more. The demand it credits is what the client earned (docs/rlqs.md,
// "Earned demand").
func (c *Client) Report(allowed, denied uint64, elapsed time.Duration, now time.Time, cfg *Config) {
	n := allowed + denied
	if n > 0 {
		c.LastActive = now
	}
	if c.LastReport.IsZero() {
		c.LastReport = now
		if elapsed >= time.Second {
			s := elapsed.Seconds()
			c.sample(c.earned(float64(allowed)/s, float64(denied)/s, cfg), elapsed, cfg)
		}
		c.heldAt, c.heldSet = c.Assigned, true
		return
	}
	c.carry += n
	c.carryAllowed += allowed
	interval := now.Sub(c.LastReport)
	if interval < cfg.Period/4 {
		return
	}
	c.LastReport = now
	s := interval.Seconds()
	a := float64(c.carryAllowed) / s
	rate := c.earned(a, float64(c.carry)/s-a, cfg)
	// The step is read over at most a period, as Envoy counts
	// (docs/rlqs.md, "A shift between two reports").
	ss := s
	if cfg.Period > 0 {
		ss = min(interval, cfg.Period).Seconds()
	}
	sa := float64(c.carryAllowed) / ss
	if x, ok := c.stepped(sa, float64(c.carry)/ss-sa); ok && x < rate {
		rate = x
	}
	c.sample(rate, interval, cfg)
	c.carry, c.carryAllowed = 0, 0
	c.heldAt, c.heldSet = c.Assigned, true
}

// held is what the client held over its last report interval: the least
// of Assigned now and at the report before.
func (c *Client) held() float64 {
	if c.heldSet {
		return min(c.Assigned, c.heldAt)
	}
	return c.Assigned
}

// Bounds of a report that stepped's reading fits: the client left at
// least stepUnused of what it held unused, and was denied for no more
// than stepMost of the interval.
const (
	stepUnused = 0.05
	stepMost   = 0.95
)

// stepped reads a report of allowed and denied rates as one step down of
// the client's demand to a rate under what it held, and returns that
// rate (docs/rlqs.md, "A shift between two reports"). It applies only to
// a client denied in part of the interval that left part of what it held
// unused.
func (c *Client) stepped(allowed, denied float64) (float64, bool) {
	// What it held through the interval: a cut sent since came after
	// the counts.
	h := c.Assigned
	if c.heldSet {
		h = c.heldAt
	}
	if !c.Known || !(c.Demand > h) || h <= 0 || denied <= 0 || allowed >= (1-stepUnused)*h {
		return 0, false
	}
	f := denied / (c.Demand - h)
	if f >= stepMost {
		return 0, false
	}
	return max(0, (allowed-h*f)/(1-f)), true
}

// earned is the demand rates of allowed and denied requests support: all
// of it, unless the client was denied requests while it used less than
// cfg.Earn of what it held (the least of Assigned now and at the last
// report, its subscription included: a raise since does not count
// against it); then what it used and cfg.Probe of what it held.
func (c *Client) earned(allowed, denied float64, cfg *Config) float64 {
	held := c.held()
	if denied <= 0 || held <= 0 || allowed >= cfg.Earn*held {
		return allowed + denied
	}
	return min(allowed+denied, allowed+cfg.Probe*held)
}

// sample folds a rate into the demand: a rise at once, a fall smoothed
// unless the client left part of what it holds unused (then at once too).
func (c *Client) sample(rate float64, over time.Duration, cfg *Config) {
	if !c.Known || rate >= c.Demand || rate < c.Assigned {
		c.Demand, c.Known = rate, true
		return
	}
	alpha := 1 - math.Exp(-over.Seconds()/cfg.Smoothing.Seconds())
	c.Demand += alpha * (rate - c.Demand)
}

// Moved reports whether the demand moved from (was, wasKnown) enough for a new division.
func (c *Client) Moved(was float64, wasKnown bool) bool {
	return c.Known != wasKnown || (c.Known && moved(was, c.Demand))
}

// Wants reports whether the client's demand is unknown or above what it
// holds.
func (c *Client) Wants() bool {
	return !c.Known || c.Demand > c.Assigned
}

// Idle reports whether the client has reported no request for d.
func (c *Client) Idle(now time.Time, d time.Duration) bool {
	last := c.LastActive
	if last.IsZero() {
		last = c.Joined
	}
	return now.Sub(last) >= d
}

// want is what a client asks of a bucket whose even split is even.
func want(demand float64, known bool, even float64, cfg *Config) float64 {
	if !known {
		return even
	}
	return math.Max(demand*(1+cfg.Headroom), even*cfg.MinWant)
}
