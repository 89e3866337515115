package load

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// maxSenders bounds the requests in flight of an open-loop phase: past it
// an arrival is not sent and counts as an error ("LOADGEN_SATURATED"), so
// that a server that stops answering cannot make the generator exhaust
// the machine.
const maxSenders = 20000

// codeSaturated is the error code of an arrival maxSenders did not let go.
const codeSaturated = "LOADGEN_SATURATED"

// OpenLoop describes an open-loop phase: the arrivals it meant to send
// and how punctually it sent them.
type OpenLoop struct {
	Rate     float64 `json:"rate"`     // requests a second meant
	Arrivals int64   `json:"arrivals"` // requests the schedule held
	// Senders is the most requests in flight at once (each has a sender
	// goroutine).
	Senders int `json:"senders"`
	// Lag is how late requests were handed to a sender, after their
	// intended times (the generator's own precision, counted in every
	// latency).
	Lag Latency `json:"send_lag"`
}

// arrival is one request of an open-loop phase: its intended send time
// and its number in the phase's schedule.
type arrival struct {
	at time.Time
	n  uint64
}

// openPhase is what the pacer and the senders of one phase share.
type openPhase struct {
	g     *Generator
	ctx   context.Context
	seed  uint64 // of the phase's identifiers
	idle  chan arrival
	wg    sync.WaitGroup
	mu    sync.Mutex
	stats []*stats // every sender's
}

// runOpen runs one open-loop phase of d: arrivals at cfg.Rate, numbered
// from 0, with their identifiers drawn from (Seed, phase, arrival), so
// that every server given the same Config sees the same requests at the
// same times. Requests in flight at the end finish and count.
func (g *Generator) runOpen(ctx context.Context, d time.Duration, phase uint64) (*stats, time.Duration, *OpenLoop) {
	p := &openPhase{g: g, ctx: ctx, seed: mix(g.cfg.Seed, phase), idle: make(chan arrival)}
	start := time.Now()
	paced := make(chan *OpenLoop)
	go func() {
		s := newSleeper()
		defer s.close()
		paced <- p.pace(s, rand.New(rand.NewPCG(g.cfg.Seed, phase)), start, start.Add(d))
	}()
	open := <-paced
	close(p.idle)
	p.wg.Wait()
	took := time.Since(start)
	total := newStats()
	for _, st := range p.stats {
		total.merge(st)
	}
	return total, took, open
}

// pace hands each arrival of the schedule (exponential gaps of mean
// 1/Rate from start, until end) to an idle sender at its intended time,
// or to a new sender when none is idle.
func (p *openPhase) pace(s sleeper, rng *rand.Rand, start, end time.Time) *OpenLoop {
	cfg := &p.g.cfg
	open := &OpenLoop{Rate: cfg.Rate}
	lag := &histogram{}
	next := start
	for n := uint64(0); ; n++ {
		next = next.Add(time.Duration(rng.ExpFloat64() / cfg.Rate * float64(time.Second)))
		if !next.Before(end) || cfg.Requests > 0 && int64(n) >= cfg.Requests || p.ctx.Err() != nil {
			break
		}
		until(s, next)
		lag.record(time.Since(next))
		open.Arrivals++
		a := arrival{at: next, n: n}
		select {
		case p.idle <- a:
			continue
		default:
		}
		if open.Senders >= maxSenders {
			st := newStats()
			st.fail(codeSaturated, errSaturated)
			p.add(st)
			continue
		}
		open.Senders++
		p.wg.Add(1)
		go p.sender(open.Senders-1, a)
	}
	open.Lag = Latency{P50: us(lag.quantile(0.5)), P90: us(lag.quantile(0.9)), P99: us(lag.quantile(0.99)),
		P999: us(lag.quantile(0.999)), Max: us(time.Duration(lag.max)), Mean: us(lag.mean())}
	return open
}

// sender sends first, then every arrival handed to it, until the phase
// ends; i chooses its connection.
func (p *openPhase) sender(i int, first arrival) {
	defer p.wg.Done()
	cfg := &p.g.cfg
	cl := newCaller(cfg, p.g.clients[i%len(p.g.clients)], uint64(i))
	p.add(cl.st)
	for a, ok := first, true; ok; a, ok = <-p.idle {
		for k, e := range cl.entries {
			cl.set(e, p.identifier(a.n, k))
		}
		cl.call(p.ctx, a.at)
	}
}

// add keeps st to merge when the phase ends.
func (p *openPhase) add(st *stats) {
	p.mu.Lock()
	p.stats = append(p.stats, st)
	p.mu.Unlock()
}

// identifier returns descriptor k's identifier of arrival n.
func (p *openPhase) identifier(n uint64, k int) int64 {
	cfg := &p.g.cfg
	if cfg.Pick == PickSeq {
		return cfg.Offset + (p.g.seq.Add(1)-1)%cfg.Keys
	}
	return cfg.Offset + int64(mix(p.seed, n<<8|uint64(k&0xff))%uint64(cfg.Keys))
}

// mix hashes a and b (splitmix64's finalizer over their combination).
func mix(a, b uint64) uint64 {
	z := a*0x9e3779b97f4a7c15 + b + 0x632be59bd9b4e019
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

var errSaturated = errors.New("too many requests in flight: not sent")
