package statsd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/observe/flap"
)

// Format is the line format a Client writes.
type Format uint8

// Formats.
const (
	Gostats   Format = iota // "name.__tag=value:N|c", as lyft/gostats writes (USE_STATSD)
	DogStatsD               // "name:N|c|#tag:value", names mogrified (USE_DOG_STATSD)
)

// Tag is a statsd tag.
type Tag struct{ Key, Value string }

// Mogrifier rewrites a DogStatsD name, as envoyproxy/ratelimit's
// USE_DOG_STATSD_MOGRIFIERS do: a name Pattern matches is sent as Name with
// Tags added, $0, $1, ... in either replaced by the match and its submatches.
type Mogrifier struct {
	Pattern *regexp.Regexp
	Name    string
	Tags    []Tag
}

// Options configure a Client.
type Options struct {
	Network    string        // "tcp" (gostats' default) or "udp"
	Addr       string        // the server's host:port
	Format     Format        // Gostats or DogStatsD
	Tags       []Tag         // added to every stat (EXTRA_TAGS)
	Mogrifiers []Mogrifier   // the first that matches applies to a DogStatsD name
	Timeout    time.Duration // bounds a dial and a write (default 1s)
}

const maxDatagram = 1432 // the largest UDP payload: unfragmented at a 1500-byte MTU

// Client sends a Store's stats to a statsd server. Each Flush sends what
// every counter counted since the last Flush that reached the server, so
// counts a failed Flush could not send go with the next
// (docs/design.md#statsd). It is safe for concurrent use.
type Client struct {
	store   *Store
	opts    Options
	log     *zap.Logger
	tagSufx string // Gostats: ".__k=v..." after every name
	conn    net.Conn
	failing *flap.Condition // the flushes' changes of state, logged
}

// NewClient returns a client of store; it dials on its first Flush.
func NewClient(store *Store, o Options, log *zap.Logger) (*Client, error) {
	switch o.Network {
	case "":
		o.Network = "tcp"
	case "tcp", "udp":
	default:
		return nil, fmt.Errorf("statsd network %q is neither tcp nor udp", o.Network)
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return nil, fmt.Errorf("statsd address %q: %w", o.Addr, err)
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	// gostats drops tags with an empty key or value.
	o.Tags = slices.DeleteFunc(slices.Clone(o.Tags), func(t Tag) bool { return t.Key == "" || t.Value == "" })
	slices.SortFunc(o.Tags, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
	c := &Client{store: store, opts: o, log: log, failing: flap.New(log, flap.DefaultEvery, nil)}
	for _, t := range o.Tags {
		c.tagSufx += ".__" + t.Key + "=" + cleanTagValue(t.Value)
	}
	return c, nil
}

// cleanTagValue replaces the characters statsd lines reserve, as gostats does.
func cleanTagValue(v string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', ':', '|':
			return '_'
		}
		return r
	}, v)
}

// packet is one write and the counts it carries.
type packet struct {
	data   []byte
	counts []count
}

type count struct {
	c *Counter
	n uint64
}

// Flush sends what the counters counted since the last successful Flush,
// every gauge and the timers' values; on an error, the counts not sent go
// with the next Flush.
func (c *Client) Flush(ctx context.Context) error {
	c.store.flush.Lock()
	defer c.store.flush.Unlock()
	pkts := c.packets()
	if len(pkts) == 0 {
		return nil
	}
	if c.conn == nil {
		d := net.Dialer{Timeout: c.opts.Timeout}
		conn, err := d.DialContext(ctx, c.opts.Network, c.opts.Addr)
		if err != nil {
			return fmt.Errorf("statsd dial %s %s: %w", c.opts.Network, c.opts.Addr, err)
		}
		c.conn = conn
	}
	for _, p := range pkts {
		_ = c.conn.SetWriteDeadline(time.Now().Add(c.opts.Timeout))
		if _, err := c.conn.Write(p.data); err != nil {
			_ = c.conn.Close()
			c.conn = nil
			return fmt.Errorf("statsd write to %s: %w", c.opts.Addr, err)
		}
		for _, n := range p.counts {
			n.c.sent += n.n
		}
	}
	return nil
}

// packets runs the generators and formats the stats into writes: one over
// TCP, datagrams of at most maxDatagram bytes over UDP.
func (c *Client) packets() []packet {
	limit := maxDatagram
	if c.opts.Network == "tcp" {
		limit = 1 << 30
	}
	c.store.Generate()
	var pkts []packet
	var cur packet
	var line []byte
	add := func(ct *count) {
		if len(cur.data) > 0 && len(cur.data)+len(line) > limit {
			pkts = append(pkts, cur)
			cur = packet{}
		}
		cur.data = append(cur.data, line...)
		if ct != nil {
			cur.counts = append(cur.counts, *ct)
		}
	}
	for _, ctr := range c.store.Counters() {
		n := ctr.Value() - ctr.sent
		if n == 0 {
			continue
		}
		line = c.appendLine(line[:0], ctr.name, n, "|c", "")
		add(&count{ctr, n})
	}
	for _, g := range c.store.Gauges() {
		line = c.appendLine(line[:0], g.name, g.Value(), "|g", "")
		add(nil)
	}
	for _, t := range c.store.Timers() {
		vals, seen := t.take()
		rate := ""
		if uint64(len(vals)) < seen {
			rate = "|@" + strconv.FormatFloat(float64(len(vals))/float64(seen), 'g', 6, 64)
		}
		for _, v := range vals {
			line = c.appendLine(line[:0], t.name, v, "|ms", rate)
			add(nil)
		}
	}
	if len(cur.data) > 0 {
		pkts = append(pkts, cur)
	}
	return pkts
}

// appendLine appends a stat's line of type typ ("|c", "|g", "|ms") and rate.
func (c *Client) appendLine(b []byte, name string, n uint64, typ, rate string) []byte {
	if c.opts.Format == Gostats {
		b = append(b, name...)
		b = append(b, c.tagSufx...)
		b = append(b, ':')
		b = strconv.AppendUint(b, n, 10)
		b = append(b, typ...)
		b = append(b, rate...)
		return append(b, '\n')
	}
	name, mtags := mogrify(c.opts.Mogrifiers, name)
	b = append(b, name...)
	b = append(b, ':')
	b = strconv.AppendUint(b, n, 10)
	b = append(b, typ...)
	b = append(b, rate...)
	sep := "|#"
	for _, t := range c.opts.Tags {
		b = append(b, sep...)
		b = append(b, t.Key+":"+cleanTagValue(t.Value)...)
		sep = ","
	}
	for _, t := range mtags {
		b = append(b, sep...)
		b = append(b, t...)
		sep = ","
	}
	return append(b, '\n')
}

var groupRef = regexp.MustCompile(`\$\d+`)

// mogrify applies the first mogrifier that matches name.
func mogrify(ms []Mogrifier, name string) (string, []string) {
	for _, m := range ms {
		subs := m.Pattern.FindStringSubmatch(name)
		if subs == nil {
			continue
		}
		expand := func(tmpl string) string {
			return groupRef.ReplaceAllStringFunc(tmpl, func(ref string) string {
				i, err := strconv.Atoi(ref[1:])
				if err != nil || i >= len(subs) {
					return ref
				}
				return subs[i]
			})
		}
		tags := make([]string, len(m.Tags))
		for i, t := range m.Tags {
			tags[i] = t.Key + ":" + expand(t.Value)
		}
		return expand(m.Name), tags
	}
	return name, nil
}

// Run flushes every interval until ctx ends, then once more within the
// Timeout. It logs when flushes start failing and when they recover, at
// most once per flap.DefaultEvery.
func (c *Client) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.flushAndLog(ctx)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.Timeout)
			c.flushAndLog(fctx)
			cancel()
			return
		}
	}
}

func (c *Client) flushAndLog(ctx context.Context) {
	if err := c.Flush(ctx); err != nil {
		c.failing.Down("statsd flush failed; counts are kept for the next flush", zap.Error(err))
	} else {
		c.failing.Up("statsd flush succeeded again", zap.String("addr", c.opts.Addr))
	}
}

// Close closes the connection, if any.
func (c *Client) Close() error {
	c.store.flush.Lock()
	defer c.store.flush.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

// ErrTags marks a malformed tags list.
var ErrTags = errors.New("invalid tags")

// ParseTags parses "k1:v1,k2:v2" (EXTRA_TAGS, a mogrifier's TAGS); a value
// may hold ':', and "" is no tags.
func ParseTags(s string) ([]Tag, error) {
	if s == "" {
		return nil, nil
	}
	var tags []Tag
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, ":")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: %q is not key:value", ErrTags, kv)
		}
		tags = append(tags, Tag{k, v})
	}
	return tags, nil
}
