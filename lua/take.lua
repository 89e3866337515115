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
ARGV[2]  map     one byte per op: byte i is the number (1-based) of op i's
                 parameters among those that follow, so that the ops of a
                 call that share their parameters (most do: one rule, one
                 cost) send them once
ARGV[3...] the parameters, one set after another:
         fixed_window   0, now, limit, window, cost
         sliding_window 1, now, limit, window, cost
         token_bucket   2, now, burst, num, den, window, cost
         now     decision time, Unix ms; 0 means Redis TIME (read once)
         limit   window capacity, milli-requests (0 <= limit <= 2^50)
         window  window length W, ms (windows: a positive multiple of 1000)
         cost    charge, milli-requests; 0 peeks without writing
         burst   bucket capacity, milli-tokens (0 <= burst <= 2^50)
         num/den refill rate, milli-tokens per ms, (burst + num) * den < 2^53
Returns  {tag, clock, then per op: fixed_window: count; sliding_window and
         token_bucket: allowed, remaining, retry_after, reset}. clock is the
         Redis TIME the ops with now 0 were decided at (0 if none);
         allowed is 1 or 0, remaining in milli-requests, retry_after and
         reset in ms.

A call on a Redis Cluster node whose keys span slots declares none
(numkeys 0: Redis refuses declared keys of several slots with CROSSSLOT
before the script runs) and sends them after the map instead, as
ARGV[3 .. 2 + n], n = #map, the parameters following; the script then
needs the allow-cross-slot-keys flag (lua.go's TakeCrossSlot). An op whose
key this node does not serve (the slot moved, or is moving) fails its
first command, which this mode runs with redis.pcall: nothing of the op
is written and its reply is -1 (fixed_window) or -1, 0, 0, 0, so that the
caller sends it again where the Cluster says; the other ops are decided.

fixed_window (envoyproxy/ratelimit's algorithm): ws = now - now % W. With a
cost, count = INCRBY cost (the counter grows even when over the limit),
saturating at 2^52 (a count past it is SET back to 2^52, KEEPTTL); the
INCRBY that creates the counter (count == cost) sets PEXPIREAT ws + W. A
peek reads count = GET or 0. The reply is the count alone: the caller
derives reset = ws + W - now, allowed = count <= limit,
remaining = max(limit - count, 0) and retry_after = reset when denied
(pkg/store/script.go, fixedResult), so that Redis formats one integer a
decision rather than four.

sliding_window: the counters of this window (cur) and of the previous one
(prev, capped at limit); arith.lua's sliding_decide weighs prev by the share
of its milliseconds still inside (now - W, now] and derives retry_after.
Only an allowed charge writes: INCRBY cur cost, PEXPIREAT cur ws + 2W.

token_bucket: a bucket of burst milli-tokens refilled at num/den per ms with
the remainder carried (arith.lua's bucket_decide, bucket_reply). A missing
key is a full bucket. A peek writes nothing and is allowed. A charge writes
the state: a full bucket is deleted, any other stored (fields t, ts, c) with
PEXPIREAT ts + max(fill, 1), when it would be full again.

Cost: what Redis spends on a call is mostly moving arguments and replies
and running redis.call, so an op sends one argument of its own (its key)
and converts no number it need not convert. All numbers stay below 2^53,
so Lua's doubles hold them exactly; pkg/store/memory.go mirrors this script
step for step, and atomic.lua decides the same ops all or nothing.
]]

-- #include arith.lua

local call, byte, tonumber = redis.call, string.byte, tonumber
local MAXS = '4503599627370496' -- MAX as Redis takes it, without a sprintf a call

-- The parameter sets, each converted once: P[k] = {alg, now, ...}, and for
-- windows the key suffixes and expiries as the strings Redis takes.
local map = ARGV[2]
local K, koff, a, first = KEYS, 0, 3, call
local cross = #KEYS == 0
if cross then
  K, koff, a, first = ARGV, 2, 3 + #map, redis.pcall
end

local clock = 0
local P = {}
local nargs = #ARGV
while a <= nargs do
  local alg, now = ARGV[a], ARGV[a + 1]
  if now == '0' then
    if clock == 0 then
      local t = call('TIME')
      clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    now = clock
  else
    now = tonumber(now)
  end
  if alg == '2' then
    P[#P + 1] = {2, now, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]),
      tonumber(ARGV[a + 5]), math.min(tonumber(ARGV[a + 6]), MAX)}
    a = a + 7
  else
    local limit, window, cs = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), ARGV[a + 4]
    local cost = tonumber(cs)
    if cost > MAX then
      cost, cs = MAX, MAXS
    end
    local ws = now - now % window
    if alg == '0' then
      P[#P + 1] = {0, now, limit, window, cost, cs, int(ws / 1000), int(ws + window)}
    else
      P[#P + 1] = {1, now, limit, window, cost, int(cost), int(ws / 1000), int(ws + 2 * window),
        int((ws - window) / 1000), ws}
    end
    a = a + 5
  end
end

local out = {tonumber(ARGV[1]), clock}
local n = 2
for i = 1, #map do
  local p = P[byte(map, i)]
  local alg = p[1]
  local base = K[koff + i]
  if alg == 0 then
    local key = base .. p[7]
    local count
    if p[5] > 0 then
      count = first('INCRBY', key, p[6])
      if cross and type(count) == 'table' then
        count = -1 -- not this node's key: not decided
      elseif count == p[5] then
        call('PEXPIREAT', key, p[8])
      elseif count > MAX then
        count = MAX
        call('SET', key, MAXS, 'KEEPTTL')
      end
    else
      count = first('GET', key)
      if cross and type(count) == 'table' then
        count = -1
      else
        count = tonumber(count or 0)
      end
    end
    n = n + 1
    out[n] = count
  elseif alg == 1 then
    local now, limit, window, cost = p[2], p[3], p[4], p[5]
    local cur_key = base .. p[7]
    local cur = first('GET', cur_key)
    if cross and type(cur) == 'table' then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = -1, 0, 0, 0
    else
      cur = tonumber(cur or 0)
      local prev = math.min(tonumber(call('GET', base .. p[9]) or 0), limit)
      local allowed, remaining, retry, reset = sliding_decide(limit, window, cost, now - p[10], cur, prev)
      if allowed == 1 and cost > 0 then
        call('INCRBY', cur_key, p[6])
        call('PEXPIREAT', cur_key, p[8])
      end
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = allowed, remaining, retry, reset
    end
    n = n + 4
  else
    local now, burst, num, den, window, cost = p[2], p[3], p[4], p[5], p[6], p[7]
    local key = base .. 'bucket'
    local t, ts, c = burst, now, 0
    local state = first('HMGET', key, 't', 'ts', 'c')
    if cross and state.err then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = -1, 0, 0, 0
    else
      if state[1] then
        t = tonumber(state[1])
        ts = tonumber(state[2]) or now
        c = tonumber(state[3]) or 0
      end
      local allowed
      allowed, t, ts, c = bucket_decide(burst, num, den, cost, now, t, ts, c)
      if cost > 0 then
        if t >= burst then
          call('DEL', key)
        else
          call('HSET', key, 't', int(t), 'ts', int(ts), 'c', int(c))
          call('PEXPIREAT', key, int(ts + math.max(bucket_fill(burst, num, den, t, c), 1)))
        end
      end
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = bucket_reply(burst, num, den, window, cost, allowed, t, c)
    end
    n = n + 4
  end
end
return out
