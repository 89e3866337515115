-- arith.lua: the arithmetic the scripts share, without Redis calls. lua.go
-- puts it where a script has the line "-- #include arith.lua" (take.lua,
-- atomic.lua); take.lua's header describes what it computes.

local MAX = 4503599627370496 -- 2^52: counters and costs saturate here
local STEPS = 94000000 -- sliding window: Wg stays below this, so Wg * Wg < 2^53

local function int(x)
  return string.format('%.0f', x)
end

-- fixed_reply answers a fixed-window op whose window holds count after
-- it, reset ms before the window ends: allowed (1 or 0), remaining,
-- retry_after and reset.
local function fixed_reply(limit, count, reset)
  if count <= limit then
    return 1, limit - count, 0, reset
  end
  return 0, 0, reset, reset
end

-- sliding_decide decides a sliding-window op elapsed ms into its window,
-- from the count of this window (cur) and of the previous one (prev,
-- already capped at limit). Returns allowed (1 or 0), remaining,
-- retry_after and reset.
local function sliding_decide(limit, window, cost, elapsed, cur, prev)
  local reset = window - elapsed
  local g = 1
  while math.floor(window / g) >= STEPS do
    g = g * 1000
  end
  local wg = math.floor(window / g)

  -- share returns floor(p * rem / wg) without forming p * rem.
  local function share(p, rem)
    local q = math.floor(p / wg)
    local r = p - q * wg
    return q * rem + math.floor(r * rem / wg)
  end

  -- maxrem returns the largest rem in [0, wg] with share(p, rem) <= a (a >= 0).
  local function maxrem(p, a)
    local lo, hi = 0, wg
    while lo < hi do
      local mid = math.floor((lo + hi + 1) / 2)
      if share(p, mid) <= a then
        lo = mid
      else
        hi = mid - 1
      end
    end
    return lo
  end

  local weighted = cur + share(prev, wg - 1 - math.floor(elapsed / g))
  if weighted + cost <= limit then
    return 1, limit - weighted - cost, 0, reset
  end
  local retry
  if cost > limit then
    retry = window
  elseif cur <= limit - cost then
    retry = (wg - 1 - maxrem(prev, limit - cost - cur)) * g - elapsed
  else
    retry = reset + math.max(wg - 1 - maxrem(math.min(cur, limit), limit - cost), 0) * g
  end
  return 0, math.max(limit - weighted, 0), retry, reset
end

-- bucket_fill returns the ms until a bucket of t tokens and carry c is full.
local function bucket_fill(burst, num, den, t, c)
  return math.ceil(((burst - t) * den - c) / num)
end

-- bucket_decide refills the bucket state (t, ts, c) up to now and charges
-- cost if the tokens allow it (a peek, cost 0, is allowed). Returns allowed
-- (a boolean) and the new t, ts, c.
local function bucket_decide(burst, num, den, cost, now, t, ts, c)
  local elapsed = math.max(0, now - ts)
  if t >= burst or elapsed >= bucket_fill(burst, num, den, t, c) then
    t, c = burst, 0
  else
    local n = elapsed * num + c
    local add = math.floor(n / den)
    t = t + add
    c = n - add * den
  end
  ts = math.max(ts, now)
  local allowed = true
  if cost > 0 then
    allowed = t >= cost
    if allowed then
      t = t - cost
    end
  end
  return allowed, t, ts, c
end

-- bucket_reply returns a bucket op's reply: allowed (1 or 0), remaining,
-- retry_after and reset, for the state bucket_decide left.
local function bucket_reply(burst, num, den, window, cost, allowed, t, c)
  local reset = 0
  if t < burst then
    reset = bucket_fill(burst, num, den, t, c)
  end
  if allowed then
    return 1, t, 0, reset
  end
  local retry = window
  if cost <= burst then
    retry = math.ceil(((cost - t) * den - c) / num)
  end
  return 0, t, retry, reset
end
