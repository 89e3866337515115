package quota

import (
	"math"
	"time"
)

// Config tunes the division of a bucket's limit. Zero fields take the
// defaults of DefaultConfig.
type Config struct {
	// Period is the report period clients follow (Envoy's is 5s).
	Period time.Duration
	// Headroom is the fraction added to a client's measured demand, so
	// that growing demand is admitted until the next report shows it.
	Headroom float64
	// MinWant is the least a client wants, as a fraction of the limit's
	// even split, so that an idle client still gets a little at once.
	MinWant float64
	// Smoothing is the time constant over which a falling demand is
	// followed; a rising one is followed at once.
	Smoothing time.Duration
	// Stale is how long a client unheard of still counts (default three
	// periods).
	Stale time.Duration
	// Raise and Lower are the relative changes of a client's share below
	// which its assignment stays as it is: small changes are not worth a
	// new token bucket in Envoy. Lower is kept small, because a share
	// kept above its due is taken from the others.
	Raise, Lower float64
}

// DefaultConfig is the configuration of the zero Config.
var DefaultConfig = Config{
	Period:    5 * time.Second,
	Headroom:  0.1,
	MinWant:   0.05,
	Smoothing: 5 * time.Second,
	Raise:     0.05,
	Lower:     0.02,
}

// WithDefaults returns c with its zero fields set.
func (c Config) WithDefaults() Config {
	d := DefaultConfig
	if c.Period > 0 {
		d.Period, d.Smoothing = c.Period, c.Period
	}
	if c.Headroom > 0 {
		d.Headroom = c.Headroom
	}
	if c.MinWant > 0 {
		d.MinWant = c.MinWant
	}
	if c.Smoothing > 0 {
		d.Smoothing = c.Smoothing
	}
	d.Stale = 3 * d.Period
	if c.Stale > 0 {
		d.Stale = c.Stale
	}
	if c.Raise > 0 {
		d.Raise = c.Raise
	}
	if c.Lower > 0 {
		d.Lower = c.Lower
	}
	return d
}

// Limit is a bucket's global limit: Rate requests per second, with bursts
// of up to Burst requests.
type Limit struct {
	Rate  float64
	Burst float64
}

// Demand is one client's demand in a bucket, as replicas publish it.
type Demand struct {
	Replica string
	Client  string
	// Rate is the demand in requests per second; negative while it is not
	// known yet (a client that has only subscribed).
	Rate float64
}

// Client is one client's state in a bucket on the replica that serves it.
type Client struct {
	ID string
	// Demand is the smoothed demand (allowed + denied per second), valid
	// when Known.
	Demand float64
	Known  bool
	// Joined, LastReport and LastActive are server times: when the client
	// subscribed, last reported, and last reported a request.
	Joined, LastReport, LastActive time.Time
	// Assigned is the share last assigned, 0 before the first.
	Assigned float64

	carry uint64 // requests of reports too close to measure yet
}

// Observe takes a report of n requests (allowed + denied). The rate is
// measured over the server's own clock since the client's last report; a
// report that comes within a quarter period of the last is carried into
// the next measurement. For the first report of a client, Envoy's
// time_elapsed (whole seconds) is used if it is at least a second (the
// first report on a reopened stream), else the demand stays unknown (a
// subscription says nothing about the rate).
func (c *Client) Observe(n uint64, elapsed time.Duration, now time.Time, cfg *Config) {
	if n > 0 {
		c.LastActive = now
	}
	if c.LastReport.IsZero() {
		c.LastReport = now
		if elapsed >= time.Second {
			c.sample(float64(n)/elapsed.Seconds(), elapsed, cfg)
		}
		return
	}
	c.carry += n
	interval := now.Sub(c.LastReport)
	if interval < cfg.Period/4 {
		return
	}
	c.LastReport = now
	c.sample(float64(c.carry)/interval.Seconds(), interval, cfg)
	c.carry = 0
}

// sample folds a measured rate into the demand: a rise at once, a fall
// smoothed over cfg.Smoothing.
func (c *Client) sample(rate float64, over time.Duration, cfg *Config) {
	if !c.Known || rate >= c.Demand {
		c.Demand, c.Known = rate, true
		return
	}
	alpha := 1 - math.Exp(-over.Seconds()/cfg.Smoothing.Seconds())
	c.Demand += alpha * (rate - c.Demand)
}

// Moved reports whether the client's demand moved from (was, wasKnown)
// by more than is worth a new division.
func (c *Client) Moved(was float64, wasKnown bool) bool {
	return c.Known != wasKnown || (c.Known && moved(was, c.Demand))
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
