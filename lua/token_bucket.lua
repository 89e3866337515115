--[[
token_bucket.lua: a bucket of Burst milli-tokens refilled continuously at
RateNum/RateDen milli-tokens per ms, with the remainder of every refill
carried so that none is lost to rounding.

KEYS[1]  base key, ending in ':' and holding a {hash tag}. The bucket is the
         hash KEYS[1] .. 'bucket' with fields t (tokens, milli), ts (time of
         the last refill, Unix ms) and c (refill carry, in 1/RateDen
         milli-tokens, 0 <= c < RateDen).
ARGV[1]  burst   capacity, milli-tokens (0 <= burst <= 2^50)
ARGV[2]  num     refill rate numerator (> 0)
ARGV[3]  den     refill rate denominator (> 0), (burst + num) * den < 2^53
ARGV[4]  window  the limit's window, ms: retry_after of a cost that exceeds
                 the burst and can never pass
ARGV[5]  cost    charge, milli-tokens; 0 peeks without writing
ARGV[6]  now     decision time, Unix ms; 0 means Redis TIME
Returns  {allowed (1 or 0), remaining (milli-tokens), retry_after (ms),
          reset (ms until the bucket is full, 0 when full)}

A missing key is a full bucket: t = burst, ts = now, c = 0. With
fill(t, c) = ceil(((burst - t) * den - c) / num), the ms until t reaches
burst: elapsed = max(0, now - ts); if t < burst, either elapsed >= fill(t, c)
and the bucket is full (t = burst, c = 0), or n = elapsed * num + c,
t = t + floor(n / den), c = n % den. A t at or above burst (the burst was
lowered) counts as full. ts = max(ts, now).
A peek (cost 0) writes nothing and is allowed. Otherwise allowed = t >= cost,
an allowed charge takes cost from t, and the state is written: a full bucket
is deleted, any other is stored with PEXPIREAT ts + max(fill(t, c), 1), when
it would be full again and so no different from a missing key.
retry_after = 0 if allowed, window if cost > burst, else
ceil(((cost - t) * den - c) / num).

All numbers stay below 2^53, so Lua's doubles hold them exactly;
pkg/store/memory.go mirrors this script step for step.
]]

-- #include arith.lua

local burst = tonumber(ARGV[1])
local num = tonumber(ARGV[2])
local den = tonumber(ARGV[3])
local window = tonumber(ARGV[4])
local cost = math.min(tonumber(ARGV[5]), MAX)
local now = tonumber(ARGV[6])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local key = KEYS[1] .. 'bucket'
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
return {bucket_reply(burst, num, den, window, cost, allowed, t, c)}
