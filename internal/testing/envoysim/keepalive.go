package envoysim

import "time"

// Keepalive is the RLQS cluster's HTTP/2 connection_keepalive: a PING
// every Interval and Jitter of it, the connection aborted when no frame
// arrives within Timeout of one (any frame counts, as in Envoy). Envoy
// adds a random jitter of up to interval_jitter; the simulator adds all
// of it, Envoy's slowest detection. A zero Interval pings never.
type Keepalive struct {
	Interval, Timeout time.Duration
	// Jitter is interval_jitter as a fraction (0: Envoy's default 15%;
	// negative: none).
	Jitter float64
}

// period is the time between two pings.
func (k Keepalive) period() time.Duration {
	j := k.Jitter
	switch {
	case j == 0:
		j = 0.15
	case j < 0:
		j = 0
	}
	return k.Interval + time.Duration(float64(k.Interval)*j)
}

// Pinger is a Stream whose connection answers HTTP/2 pings: Ping sends
// one, and its channel closes when the answer arrives (never, through a
// black hole).
type Pinger interface {
	Ping() <-chan struct{}
}

// Aborter is a Stream whose connection can be aborted, as Envoy aborts a
// connection whose ping went unanswered: the next stream needs another.
type Aborter interface {
	Abort()
}

// keepalive is a stream's keepalive state.
type keepalive struct {
	next   time.Time       // the next ping
	sentAt time.Time       // of the ping awaiting its answer
	ack    <-chan struct{} // that ping's answer; nil: none awaited
	last   time.Time       // the last frame received
}

func (k *keepalive) opened(now time.Time, cfg Keepalive) {
	*k = keepalive{next: now.Add(cfg.period()), last: now}
}

func (k *keepalive) frame(now time.Time) { k.last = now }

// keepalive pings the stream's connection when due and aborts the stream
// when a ping got no answer, nor any other frame, within the timeout;
// the next report tick opens another (onRemoteClose).
func (e *Envoy) keepalive(now time.Time) {
	cfg, k := e.cfg.Keepalive, &e.ka
	if cfg.Interval <= 0 || e.stream == nil {
		return
	}
	if k.ack != nil {
		select {
		case <-k.ack:
			k.ack, k.last = nil, now
		default:
		}
	}
	if k.ack != nil && k.last.After(k.sentAt) {
		k.ack = nil // another frame answered for it
	}
	if k.ack != nil && now.Sub(k.sentAt) >= cfg.Timeout {
		e.stats.KeepaliveAborts++
		e.stats.StreamsClosed++
		if a, ok := e.stream.(Aborter); ok {
			a.Abort()
		}
		e.cancel()
		e.stream, k.ack = nil, nil
		clear(e.awaiting)
		return
	}
	if now.Before(k.next) {
		return
	}
	k.next = now.Add(cfg.period())
	if p, ok := e.stream.(Pinger); ok && k.ack == nil {
		k.ack, k.sentAt = p.Ping(), now
	}
}
