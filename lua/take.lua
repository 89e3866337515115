--[[
take.lua: independent rate-limit decisions, any number of them and of any
algorithms, in one script call. Each op is decided exactly as if it were
alone, in order (an op sees the writes of the ops before it), at Redis TIME
or at the time it carries.

KEYS[i]  base key of op i, ending in ':' and holding a {hash tag}. Window
         counters live at KEYS[i] .. S, S a window start in Unix seconds;
         a token bucket is the hash KEYS[i] .. 'bucket'.
ARGV[1]  tag     an integer below 2^53, echoed as the reply's first element
                 so that the caller can tell its reply from any other
ARGV[...] per op, in the order of KEYS:
         fixed_window   0, now, limit, window, cost
         sliding_window 1, now, limit, window, cost
         token_bucket   2, now, burst, num, den, window, cost
         now     decision time, Unix ms; 0 means Redis TIME (read once)
         limit   window capacity, milli-requests (0 <= limit <= 2^50)
         window  window length W, ms (windows: a positive multiple of 1000)
         cost    charge, milli-requests; 0 peeks without writing
         burst   bucket capacity, milli-tokens (0 <= burst <= 2^50)
         num/den refill rate, milli-tokens per ms, (burst + num) * den < 2^53
Returns  {tag, allowed_1, remaining_1, retry_after_1, reset_1, allowed_2, ...}:
         four integers per op, allowed 1 or 0, remaining in milli-requests,
         retry_after and reset in ms.

fixed_window (envoyproxy/ratelimit's algorithm): ws = now - now % W,
reset = ws + W - now. With a cost, count = INCRBY cost (the counter grows
even when over the limit), saturating at 2^52 (a count past it is SET back
to 2^52, KEEPTTL); the INCRBY that creates the counter (count == cost) sets
PEXPIREAT ws + W. A peek reads count = GET or 0. allowed = count <= limit;
remaining = max(limit - count, 0); retry_after = reset when denied.

sliding_window: the counters of this window (cur) and of the previous one
(prev, capped at limit); arith.lua's sliding_decide weighs prev by the share
of its milliseconds still inside (now - W, now] and derives retry_after.
Only an allowed charge writes: INCRBY cur cost, PEXPIREAT cur ws + 2W.

token_bucket: a bucket of burst milli-tokens refilled at num/den per ms with
the remainder carried (arith.lua's bucket_decide, bucket_reply). A missing
key is a full bucket. A peek writes nothing and is allowed. A charge writes
the state: a full bucket is deleted, any other stored (fields t, ts, c) with
PEXPIREAT ts + max(fill, 1), when it would be full again.

All numbers stay below 2^53, so Lua's doubles hold them exactly;
pkg/store/memory.go mirrors this script step for step, and atomic.lua
decides the same ops all or nothing.
]]

-- #include arith.lua

local clock = 0
local function time_of(now)
  if now ~= 0 then
    return now
  end
  if clock == 0 then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return clock
end

local function fixed(base, now, limit, window, cost)
  local ws = now - now % window
  local key = base .. int(ws / 1000)
  local count
  if cost > 0 then
    count = redis.call('INCRBY', key, int(cost))
    if count == cost then
      redis.call('PEXPIREAT', key, int(ws + window))
    elseif count > MAX then
      count = MAX
      redis.call('SET', key, int(MAX), 'KEEPTTL')
    end
  else
    count = tonumber(redis.call('GET', key) or 0)
  end
  return fixed_reply(limit, count, ws + window - now)
end

local function sliding(base, now, limit, window, cost)
  local ws = now - now % window
  local cur_key = base .. int(ws / 1000)
  local prev_key = base .. int((ws - window) / 1000)
  local cur = tonumber(redis.call('GET', cur_key) or 0)
  local prev = math.min(tonumber(redis.call('GET', prev_key) or 0), limit)
  local allowed, remaining, retry, reset = sliding_decide(limit, window, cost, now - ws, cur, prev)
  if allowed == 1 and cost > 0 then
    redis.call('INCRBY', cur_key, int(cost))
    redis.call('PEXPIREAT', cur_key, int(ws + 2 * window))
  end
  return allowed, remaining, retry, reset
end

local function bucket(base, now, burst, num, den, window, cost)
  local key = base .. 'bucket'
  local t, ts, c = burst, now, 0
  local state = redis.call('HMGET', key, 't', 'ts', 'c')
  if state[1] then
    t = tonumber(state[1])
    ts = tonumber(state[2]) or now
    c = tonumber(state[3]) or 0
  end
  local allowed
  allowed, t, ts, c = bucket_decide(burst, num, den, cost, now, t, ts, c)
  if cost > 0 then
    if t >= burst then
      redis.call('DEL', key)
    else
      redis.call('HSET', key, 't', int(t), 'ts', int(ts), 'c', int(c))
      redis.call('PEXPIREAT', key, int(ts + math.max(bucket_fill(burst, num, den, t, c), 1)))
    end
  end
  return bucket_reply(burst, num, den, window, cost, allowed, t, c)
end

local out = {tonumber(ARGV[1])}
local a = 2
for i = 1, #KEYS do
  local alg = tonumber(ARGV[a])
  local now = time_of(tonumber(ARGV[a + 1]))
  local allowed, remaining, retry, reset
  if alg == 2 then
    allowed, remaining, retry, reset = bucket(KEYS[i], now, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
      tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), math.min(tonumber(ARGV[a + 6]), MAX))
    a = a + 7
  else
    local limit, window = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local cost = math.min(tonumber(ARGV[a + 4]), MAX)
    if alg == 0 then
      allowed, remaining, retry, reset = fixed(KEYS[i], now, limit, window, cost)
    else
      allowed, remaining, retry, reset = sliding(KEYS[i], now, limit, window, cost)
    end
    a = a + 5
  end
  local n = #out
  out[n + 1] = allowed
  out[n + 2] = remaining
  out[n + 3] = retry
  out[n + 4] = reset
end
return out
