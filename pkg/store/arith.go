package store

// The algorithms' arithmetic, as lua/arith.lua computes it, for Memory
// (Redis runs the Lua): integers throughout, each value below 2^53
// (docs/design.md, "Exact arithmetic"). A cost below 0 is a refund of
// -cost, as the scripts take it (scriptCost).

// windowSteps returns the step g (ms) a sliding window of window ms is
// weighed in, and the number of steps wg = window / g (wg² < 2^53).
func windowSteps(window int64) (g, wg int64) {
	g = 1
	for window/g >= slidingSteps {
		g *= 1000
	}
	return g, window / g
}

// share returns floor(p*rem/wg) without forming p*rem.
func share(p, rem, wg int64) int64 {
	return p/wg*rem + p%wg*rem/wg
}

// slidingWeigh returns the weighted count elapsed ms into the window: cur
// plus the share of prev (capped at the limit) still inside (now-W, now].
func slidingWeigh(g, wg, elapsed, cur, prev int64) int64 {
	return cur + share(prev, wg-1-elapsed/g, wg)
}

// slidingDecide decides a charge of cost elapsed ms into the window from
// this window's count cur and the previous one's prev (capped at limit,
// unless debit): the weighted count w, and whether the op is allowed
// (w+cost <= limit); when denied, retry is the ms until the same op would
// pass, after its charge when debit (charged though denied), the next
// window weighed in gn-ms steps, wgn of them.
func slidingDecide(limit, window, g, wg, cost, elapsed, cur, prev int64, debit bool, gn, wgn int64) (w, retry int64, allowed bool) {
	w = slidingWeigh(g, wg, elapsed, cur, prev)
	if w+cost <= limit {
		return w, 0, true
	}
	if debit {
		cur = min(cur+cost, maxCost)
	}
	if cost > limit {
		return w, window, false
	}
	// The op passes once the count p that slides weighs at most a: this
	// window's previous count when cur leaves it room, else, in the next
	// window, cur (capped at limit unless debit).
	p, a, later := prev, limit-cost-cur, cur > limit-cost
	if later {
		p, a, g, wg = cur, limit-cost, gn, wgn
		if !debit {
			p = min(p, limit)
		}
	}
	lo, hi := int64(0), wg // the largest rem in [0, wg] with share(p, rem) <= a
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if share(p, mid, wg) <= a {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if !later {
		return w, (wg-1-lo)*g - elapsed, false
	}
	return w, window - elapsed + max(wg-1-lo, 0)*g, false
}

// bucketDecide refills a token bucket's state (t milli-tokens, carry c/den,
// at ts) up to now and charges cost if the tokens allow it (a peek, cost
// 0, is allowed unless a debit left the bucket below zero); a refund (cost < 0) is always allowed and fills the
// bucket no further than burst (a full bucket has no carry). Denied, a
// debit op is charged all the same, to -burst at most; a state below zero
// that a debit op does not read (its limit no longer charged always) is
// forgiven, read as empty. It returns whether the op is allowed and the
// new t, ts, c.
func bucketDecide(burst, num, den, cost, now, t, ts, c int64, debit bool) (allowed bool, _, _, _ int64) {
	if t < 0 && !debit {
		t, c = 0, 0
	}
	elapsed := max(0, now-ts)
	if t >= burst || elapsed >= bucketFill(burst, num, den, t, c) {
		t, c = burst, 0
	} else {
		n := elapsed*num + c
		t += n / den
		c = n % den
	}
	ts = max(ts, now)
	switch {
	case cost > 0 && t < cost:
		if debit {
			t = max(t-cost, -burst)
		}
		return false, t, ts, c
	case cost > 0:
		t -= cost
	case cost < 0:
		t -= cost
		if t >= burst {
			t, c = burst, 0
		}
	case t < 0: // a peek at a bucket in debt
		return false, t, ts, c
	}
	return true, t, ts, c
}

// bucketFill returns the ms until a bucket holding t and carry c is full.
func bucketFill(burst, num, den, t, c int64) int64 {
	return ceilDiv((burst-t)*den-c, num)
}

// bucketExpiry returns when a bucket state written at ts may expire: once
// it is full again, at least 1 ms later.
func bucketExpiry(burst, num, den, t, c, ts int64) int64 {
	return ts + max(bucketFill(burst, num, den, t, c), 1)
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}
