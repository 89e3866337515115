-- arith.lua: the arithmetic the scripts share, without Redis calls. lua.go
-- puts it where a script has the line "-- #include arith.lua" (take.lua,
-- atomic.lua); pkg/store/memory.go computes the same in Go.
--
-- Every value is an integer below 2^53, exact in Lua's doubles; division
-- rounds down as (a - a % b) / b, which is exact there. A call builds only
-- the functions of the algorithms it has ops of (sliding_arith(),
-- bucket_arith()). Why: docs/design.md, "The scripts".

local MAX = 4503599627370496 -- 2^52: counters and costs saturate here
local BUCKET = 'tokens' -- a token bucket's key suffix
local STATE = '<ddd' -- a token bucket's value: struct.pack of t, c, ts

-- int formats an integer-valued number (below 2^63) without exponent: %d
-- is an integer conversion, far cheaper than %.0f's or Lua's %.14g.
local function int(x)
  return string.format('%d', x)
end

-- sliding_arith returns the sliding window's functions:
--
-- steps(window) returns the step g (ms) a window of window ms is weighed
-- in, and the number of steps wg = window / g (wg < 94e6, so wg^2 < 2^53).
--
-- decide(limit, window, g, wg, cost, elapsed, cur, prev, debit, next)
-- decides an op elapsed ms into its window, from the count of this window
-- (cur) and of the previous one (prev, already capped at limit unless
-- debit). It returns the weighted count w = cur + share(prev, rem), rem
-- the steps of the previous window still inside (now - W, now]; the op is
-- allowed when w + cost <= limit. For a denied op it also returns
-- retry_after, ms: when the same op would pass, after its own charge if
-- debit (charged though denied), the next window weighed in steps of
-- next = {gn, wgn} (false: g and wg, as but for a calendar's windows).
--
-- weigh(g, wg, elapsed, cur, prev) returns that w alone (a refund's).
--
-- share(p, rem) = floor(p * rem / wg), computed without forming p * rem
-- as q * rem + floor(r * rem / wg), q and r p's quotient and remainder by
-- wg. It is written out where it is needed: a function called, or one
-- that captures another, costs Redis about as much as the arithmetic.
local function sliding_arith()
  local function steps(window)
    local g = 1
    while window / g >= 94000000 do
      g = g * 1000
    end
    return g, (window - window % g) / g
  end

  local function weigh(g, wg, elapsed, cur, prev)
    local rem = wg - 1 - (elapsed - elapsed % g) / g
    local r = prev % wg
    local x = r * rem
    return cur + (prev - r) / wg * rem + (x - x % wg) / wg
  end

  local function decide(limit, window, g, wg, cost, elapsed, cur, prev, debit, next)
    local rem = wg - 1 - (elapsed - elapsed % g) / g
    local r = prev % wg
    local x = r * rem
    local w = cur + (prev - r) / wg * rem + (x - x % wg) / wg -- weigh's
    if w + cost <= limit then
      return w
    end
    if debit then
      cur = cur + cost
      if cur > 4503599627370496 then -- MAX, not captured: an upvalue costs an allocation
        cur = 4503599627370496
      end
    end
    if cost > limit then
      return w, window
    end
    -- The op passes once the count p that slides weighs at most a: this
    -- window's previous count when cur leaves it room, else, in the next
    -- window, cur (capped at limit unless debit). Find the largest rem in
    -- [0, wg] with share(p, rem) <= a.
    local p, a, later = prev, limit - cost - cur, cur > limit - cost
    if later then
      p, a = cur, limit - cost
      if next then
        g, wg = next[1], next[2]
      end
      if p > limit and not debit then
        p = limit
      end
    end
    r = p % wg
    local q = (p - r) / wg
    local lo, hi = 0, wg
    while lo < hi do
      local mid = lo + hi + 1
      mid = (mid - mid % 2) / 2
      x = r * mid
      if q * mid + (x - x % wg) / wg <= a then
        lo = mid
      else
        hi = mid - 1
      end
    end
    if not later then
      return w, (wg - 1 - lo) * g - elapsed
    end
    local s = wg - 1 - lo
    if s < 0 then
      s = 0
    end
    return w, window - elapsed + s * g
  end

  return steps, decide, weigh
end

-- bucket_arith(times) returns the token bucket's decide and, when times
-- is true, its expiry, fill and ceil_div (take.lua needs decide alone):
--
-- decide(burst, num, den, cost, now, t, ts, c, debit) refills the bucket
-- state (t milli-tokens, carry c / den, at ts) up to now and charges cost
-- if the tokens allow it (a peek, cost 0, is allowed unless a debit left the
-- bucket below zero); a negative cost is
-- a refund of -cost tokens, always allowed, that fills the bucket no
-- further than burst (a full bucket has no carry). Denied, a debit op is
-- charged all the same, to -burst at most; a state below zero that a
-- debit op does not read (its limit no longer charged always) is
-- forgiven, read as empty. It returns allowed (a boolean) and the new t,
-- ts, c.
--
-- expiry(burst, num, den, t, c, ts) returns when a state written at ts is
-- full again, and so may expire: ts + fill, at least ts + 1.
--
-- fill(burst, num, den, t, c) returns the ms until the state is full,
-- ceil(((burst - t) * den - c) / num).
--
-- ceil_div(a, b) returns ceil(a / b) for integers a >= 0, b >= 1.
local function bucket_arith(times)
  local function decide(burst, num, den, cost, now, t, ts, c, debit)
    if t < 0 and not debit then
      t, c = 0, 0
    end
    local elapsed = now - ts
    if elapsed < 0 then
      elapsed = 0
    end
    local full = t >= burst
    if not full then -- full by now: elapsed >= fill(burst, num, den, t, c), written out
      local f = (burst - t) * den - c
      local r = f % num
      f = (f - r) / num
      if r > 0 then
        f = f + 1
      end
      full = elapsed >= f
    end
    if full then
      t, c = burst, 0
    else
      local n = elapsed * num + c
      c = n % den
      t = t + (n - c) / den
    end
    if now > ts then
      ts = now
    end
    if cost > 0 then
      if t < cost then
        if debit then
          t = t - cost
          if t < -burst then
            t = -burst
          end
        end
        return false, t, ts, c
      end
      t = t - cost
    elseif cost < 0 then
      t = t - cost
      if t >= burst then
        t, c = burst, 0
      end
    elseif t < 0 then -- a peek at a bucket in debt
      return false, t, ts, c
    end
    return true, t, ts, c
  end
  if not times then
    return decide
  end

  local function ceil_div(a, b)
    local r = a % b
    if r > 0 then
      return (a - r) / b + 1
    end
    return a / b
  end

  local function fill(burst, num, den, t, c)
    local f = (burst - t) * den - c -- ceil_div(f, num), written out
    local r = f % num
    if r > 0 then
      return (f - r) / num + 1
    end
    return f / num
  end

  local function expiry(burst, num, den, t, c, ts)
    local f = fill(burst, num, den, t, c)
    if f < 1 then
      f = 1
    end
    return ts + f
  end

  return decide, expiry, fill, ceil_div
end
