--[[
sliding_window.lua: two fixed windows, the previous one weighted by how much
of it still overlaps a window ending now.

KEYS[1]  base key, ending in ':' and holding a {hash tag}. The counters live
         at KEYS[1] .. S, where S is a window start in Unix seconds.
ARGV[1]  limit   window capacity, milli-requests (integer, 0 <= limit <= 2^50)
ARGV[2]  window  window length W, ms (a positive multiple of 1000)
ARGV[3]  cost    charge, milli-requests; 0 peeks without writing
ARGV[4]  now     decision time, Unix ms; 0 means Redis TIME
Returns  {allowed (1 or 0), remaining (milli-requests), retry_after (ms),
          reset (ms)}

ws = now - now % W; elapsed = now - ws; reset = W - elapsed.
cur = count of window ws, prev = min(count of window ws - W, limit).
weighted = cur + floor(prev * (W - 1 - elapsed) / W): the previous window
counts for the share of its milliseconds still inside the sliding span
(now - W, now], so at the window's last millisecond it no longer counts and
a steady client gets exactly the limit per window. Computed exactly at a
granularity g: g = 1, times 1000 while floor(W / g) >= 94,000,000 (so g = 1
below 94,000 s, 1000 below 94,000,000 s), Wg = floor(W / g),
rem = Wg - 1 - floor(elapsed / g), and
  share(p, rem) = floor(p / Wg) * rem + floor((p % Wg) * rem / Wg)
which equals floor(p * rem / Wg) while no product exceeds about 2^53.
allowed = weighted + cost <= limit. Only an allowed charge writes:
INCRBY cur cost, PEXPIREAT cur ws + 2W (it is the previous window next).
remaining = limit - weighted - cost if allowed, else max(limit - weighted, 0).

retry_after (0 when allowed) is the shortest wait after which the same op
would pass if nothing else happened. With maxrem(p, a) the largest rem in
[0, Wg] with share(p, rem) <= a (a binary search; share grows with rem):
  cost > limit:          W (it never passes)
  cur <= limit - cost:   wait in this window until the previous window's
                         share drops to limit - cost - cur:
                         (Wg - 1 - maxrem(prev, limit - cost - cur)) * g - elapsed
  otherwise:             wait into the next window, where cur is the
                         previous count and the current count is 0:
                         reset + max(Wg - 1 - maxrem(min(cur, limit), limit - cost), 0) * g

All numbers stay below 2^53, so Lua's doubles hold them exactly;
pkg/store/memory.go mirrors this script step for step.
]]

-- #include arith.lua

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = math.min(tonumber(ARGV[3]), MAX)
local now = tonumber(ARGV[4])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local ws = now - now % window
local cur_key = KEYS[1] .. int(ws / 1000)
local prev_key = KEYS[1] .. int((ws - window) / 1000)
local cur = tonumber(redis.call('GET', cur_key) or 0)
local prev = math.min(tonumber(redis.call('GET', prev_key) or 0), limit)

local allowed, remaining, retry, reset = sliding_decide(limit, window, cost, now - ws, cur, prev)
if allowed == 1 and cost > 0 then
  redis.call('INCRBY', cur_key, int(cost))
  redis.call('PEXPIREAT', cur_key, int(ws + 2 * window))
end
return {allowed, remaining, retry, reset}
