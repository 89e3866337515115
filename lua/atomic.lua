--[[
atomic.lua: several ops decided all or nothing. The ops run in order at one
instant, each with exactly the arithmetic of take.lua's fixed_window,
sliding_window and token_bucket (arith.lua) and each seeing
the writes of the ops before it; those writes are staged in the script and
reach Redis only if the call commits.

KEYS[i]  base key of op i, ending in ':'. All KEYS of a call must share one
         {hash tag} in Redis Cluster. The state lives at KEYS[i] .. S
         (windows; S is a window start in Unix seconds) or
         KEYS[i] .. 'tokens' (token bucket), laid out as take.lua's header
         says, so that both scripts decide on the same state.
ARGV[1]  tag     an integer below 2^53, echoed as the reply's first element
ARGV[2]  now     decision time of every op, Unix ms; 0 means Redis TIME
ARGV[3 + 8 * (i - 1)] .. ARGV[10 + 8 * (i - 1)], op i:
         alg     0 fixed_window, 1 sliding_window, 2 token_bucket
         limit   window capacity, milli-requests (windows)
         window  window length, ms
         cost    charge, milli-requests; 0 peeks without writing; below 0,
                 a refund of -cost (take.lua's header), always allowed
         burst   bucket capacity, milli-tokens (token bucket)
         num     refill rate numerator (token bucket)
         den     refill rate denominator (token bucket)
         veto    how a denial weighs: 0 rejects the call, 1 rejects nothing,
                 2 rejects when every op (or joint) with veto 2 is denied;
                 plus 4 for the first op of a joint, 8 for the others
         with the ranges of the per-algorithm scripts' headers.
Returns  {tag, allowed_1, remaining_1, retry_after_1, reset_1, allowed_2, ...}:
         four integers per op, each op's reply exactly as take.lua would
         give it in this order (so an allowed op of a rejected
         call reports the remaining it would have had).

A joint is a run of ops, its first marked 4 and the others 8, of one veto:
the several limits of one descriptor. When one of its ops is denied, what
the joint staged is undone (the ops after it do not see it, and a
committed call does not write it), and a veto 2 joint counts as one op,
denied when one of its ops is.

Commit or reject: the call is rejected when an op with veto 0 is denied, or
when there are ops (or joints) with veto 2 and all of them are denied. A
committed call writes what the per-algorithm scripts would have written, in
order, with the same TTLs (fixed window: SET count PXAT ws + W, denied hits included;
sliding window: the current counter PXAT ws + 2W, allowed charges only;
token bucket: DEL when full, else SET of the packed state PXAT when full
again). A rejected call writes nothing, not even a fixed window's denied
hit.

All numbers stay below 2^53, so Lua's doubles hold them exactly;
pkg/store/memory_atomic.go mirrors this script.
]]

-- #include arith.lua

local now = tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  now = tonumber(t[1]) * 1000 + (us - us % 1000) / 1000
end

local steps, sliding_decide, weigh = sliding_arith()
local bucket_decide, bucket_expiry, bucket_fill, ceil_div = bucket_arith(true)

-- Staged state: what the ops so far wrote, read before Redis'.
local counters = {} -- window counter key -> count
local buckets = {}  -- bucket key -> {t, ts, c}, or false once deleted
local writes = {}   -- the commands to run on commit, in order
local undo          -- while a joint runs: table, key, value before, ...
local NONE = {}     -- undo's value of a key staged nothing before

local function stage(...)
  writes[#writes + 1] = {...}
end

-- save records, while a joint runs, what tbl holds at key before a change.
local function save(tbl, key)
  local v = tbl[key]
  if v == nil then
    v = NONE
  end
  undo[#undo + 1], undo[#undo + 2], undo[#undo + 3] = tbl, key, v
end

local function getcount(key)
  local n = counters[key]
  if n == nil then
    n = tonumber(redis.call('GET', key) or 0)
  end
  return n
end

-- give_back stages a refund of -cost on the window counter key that holds
-- count: the count drops, not below 0 (emptied: deleted, as if never
-- written), keeping its expiry; it returns the new count.
local function give_back(key, count, cost)
  if count > 0 then
    count = math.max(count + cost, 0)
    if undo then
      save(counters, key)
    end
    counters[key] = count
    if count == 0 then
      stage('DEL', key)
    else
      stage('SET', key, int(count), 'KEEPTTL')
    end
  end
  return count
end

-- fixed decides as take.lua's fixed_window. Its INCRBY (saturating) and
-- PEXPIREAT become one SET with PXAT of the same value and expiry.
local function fixed(base, limit, window, cost)
  local ws = now - now % window
  local key = base .. int(ws / 1000)
  local reset = ws + window - now

  local count = getcount(key)
  if cost > 0 then
    count = math.min(count + cost, MAX)
    if undo then
      save(counters, key)
    end
    counters[key] = count
    stage('SET', key, int(count), 'PXAT', int(ws + window))
  elseif cost < 0 then -- a refund: always allowed
    count = give_back(key, count, cost)
    return 1, math.max(limit - count, 0), 0, reset
  end
  if count <= limit then
    return 1, limit - count, 0, reset
  end
  return 0, 0, reset, reset
end

-- sliding decides as take.lua's sliding_window. Its INCRBY and PEXPIREAT
-- become one SET with PXAT of the same value and expiry.
local function sliding(base, limit, window, cost)
  local ws = now - now % window
  local cur_key = base .. int(ws / 1000)
  local prev_key = base .. int((ws - window) / 1000)
  local cur = getcount(cur_key)
  local prev = getcount(prev_key)
  if prev > limit then
    prev = limit
  end

  local g, wg = steps(window)
  local reset = window - (now - ws)
  if cost < 0 then -- a refund: this window's count drops
    cur = give_back(cur_key, cur, cost)
    return 1, math.max(limit - weigh(g, wg, now - ws, cur, prev), 0), 0, reset
  end
  local w, retry = sliding_decide(limit, window, g, wg, cost, now - ws, cur, prev)
  if retry then
    return 0, math.max(limit - w, 0), retry, reset
  end
  if cost > 0 then
    if undo then
      save(counters, cur_key)
    end
    counters[cur_key] = cur + cost
    stage('SET', cur_key, int(cur + cost), 'PXAT', int(ws + 2 * window))
  end
  return 1, limit - w - cost, 0, reset
end

-- bucket decides as take.lua's token_bucket.
local function bucket(base, burst, num, den, window, cost)
  local key = base .. BUCKET
  local t, ts, c = burst, now, 0
  local staged = buckets[key]
  if staged then
    t, ts, c = staged[1], staged[2], staged[3]
  elseif staged == nil then
    local state = redis.call('GET', key)
    if state then
      t, c, ts = struct.unpack(STATE, state)
    end
  end

  local allowed
  allowed, t, ts, c = bucket_decide(burst, num, den, cost, now, t, ts, c)
  if cost ~= 0 then
    if undo then
      save(buckets, key)
    end
    if t >= burst then
      buckets[key] = false
      stage('DEL', key)
    else
      buckets[key] = {t, ts, c}
      stage('SET', key, struct.pack(STATE, t, c, ts), 'PXAT', int(bucket_expiry(burst, num, den, t, c, ts)))
    end
  end
  local reset = 0
  if t < burst then
    reset = bucket_fill(burst, num, den, t, c)
  end
  if allowed then
    return 1, t, 0, reset
  end
  local retry = window
  if cost <= burst then
    retry = ceil_div((cost - t) * den - c, num)
  end
  return 0, t, retry, reset
end

-- close ends the joint running: undone if one of its ops was denied.
local joint_write, joint_denied
local function close()
  if joint_denied then
    for w = #writes, joint_write + 1, -1 do
      writes[w] = nil
    end
    for u = #undo - 2, 1, -3 do
      local v = undo[u + 2]
      if v == NONE then
        v = nil
      end
      undo[u][undo[u + 1]] = v
    end
  end
  undo = nil
end

local out = {tonumber(ARGV[1])}
local reject = false
local group, group_denied = 0, 0
local quota_denied -- the running veto 2 joint has a denied op
for i = 1, #KEYS do
  local a = 2 + 8 * (i - 1)
  local alg = tonumber(ARGV[a + 1])
  local limit = tonumber(ARGV[a + 2])
  local window = tonumber(ARGV[a + 3])
  local cost = tonumber(ARGV[a + 4])
  if cost > MAX then
    cost = MAX
  elseif cost < -MAX then
    cost = -MAX
  end
  local veto = tonumber(ARGV[a + 8])
  local joined = false -- the op continues a joint
  if veto >= 8 then
    veto, joined = veto - 8, true
  else
    if undo then
      close()
    end
    if veto >= 4 then -- the first op of a joint
      veto = veto - 4
      undo, joint_write, joint_denied = {}, #writes, false
    end
  end
  local allowed, remaining, retry, reset
  if alg == 0 then
    allowed, remaining, retry, reset = fixed(KEYS[i], limit, window, cost)
  elseif alg == 1 then
    allowed, remaining, retry, reset = sliding(KEYS[i], limit, window, cost)
  else
    allowed, remaining, retry, reset = bucket(KEYS[i], tonumber(ARGV[a + 5]),
      tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7]), window, cost)
  end
  out[#out + 1] = allowed
  out[#out + 1] = remaining
  out[#out + 1] = retry
  out[#out + 1] = reset
  if allowed == 0 and undo then
    joint_denied = true
  end
  if veto == 2 then
    if not joined then
      group, quota_denied = group + 1, false
    end
    if allowed == 0 and not quota_denied then
      group_denied, quota_denied = group_denied + 1, true
    end
  elseif veto == 0 and allowed == 0 then
    reject = true
  end
end
if undo then
  close()
end
if group > 0 and group_denied == group then
  reject = true
end

if not reject then
  for _, w in ipairs(writes) do
    redis.call(unpack(w))
  end
end
return out
