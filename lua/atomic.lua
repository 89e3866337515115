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
ARGV[3 ...] the ops' parameters, one op after another, eight each and six
         more for a calendar's:
         kind    the algorithm, 0 fixed_window, 1 sliding_window,
                 2 token_bucket, plus 3 when charged always (debit), plus
                 6 for a calendar's windows (take.lua's header)
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
         B0..B5  a calendar's periods, as take.lua takes them
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
order, with the same TTLs (fixed window: SET count PXAT the window's end,
denied hits included; sliding window: the current counter PXAT the next
window's end, allowed charges only, and a debit's; token bucket: DEL when
full, else SET of the packed state PXAT when full again). A rejected call
writes nothing, not even a fixed window's denied hit, but its debit ops'
charges: they are charged all the same, decided again alone, in order,
from the state before the call (their answers stand). A denied joint's
debit ops are likewise charged again once the joint is undone.

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

-- set stages count at window counter key, expiring at x (ms) when given,
-- else keeping its expiry.
local function set(key, count, x)
  if undo then
    save(counters, key)
  end
  counters[key] = count
  if x then
    stage('SET', key, int(count), 'PXAT', int(x))
  else
    stage('SET', key, int(count), 'KEEPTTL')
  end
end

-- give_back stages a refund of -cost on the window counter key that holds
-- count: the count drops, not below 0 (emptied: deleted, as if never
-- written), keeping its expiry; it returns the new count.
local function give_back(key, count, cost)
  if count > 0 then
    count = math.max(count + cost, 0)
    if count == 0 then
      if undo then
        save(counters, key)
      end
      counters[key] = count
      stage('DEL', key)
    else
      set(key, count)
    end
  end
  return count
end

-- fixed decides as take.lua's fixed_window, in the window [ws, we). Its
-- INCRBY (saturating) and PEXPIREAT become one SET with PXAT of the same
-- value and expiry.
local function fixed(base, limit, ws, we, cost)
  local key = base .. int(ws / 1000)
  local reset = we - now

  local count = getcount(key)
  if cost > 0 then
    count = math.min(count + cost, MAX)
    set(key, count, we)
  elseif cost < 0 then -- a refund: always allowed
    count = give_back(key, count, cost)
    return 1, math.max(limit - count, 0), 0, reset
  end
  if count <= limit then
    return 1, limit - count, 0, reset
  end
  return 0, 0, reset, reset
end

-- sliding decides as take.lua's sliding_window, in the window [ws, we),
-- the one before starting at prev, the one after ending at next. Its
-- INCRBY and PEXPIREAT become one SET with PXAT of the same value and
-- expiry.
local function sliding(base, limit, ws, we, prev_start, next_end, cost, debit)
  local cur_key = base .. int(ws / 1000)
  local prev_key = base .. int(prev_start / 1000)
  local cur = getcount(cur_key)
  local prev = getcount(prev_key)
  if prev > limit and not debit then
    prev = limit
  end

  local window = we - ws
  local g, wg = steps(window)
  local reset = we - now
  if cost < 0 then -- a refund: this window's count drops
    cur = give_back(cur_key, cur, cost)
    return 1, math.max(limit - weigh(g, wg, now - ws, cur, prev), 0), 0, reset
  end
  local next = false -- the next window's steps, when they differ
  if next_end - we ~= window then
    next = {steps(next_end - we)}
  end
  local w, retry = sliding_decide(limit, window, g, wg, cost, now - ws, cur, prev, debit, next)
  if cost > 0 and (debit or not retry) then
    set(cur_key, math.min(cur + cost, MAX), next_end)
  end
  if retry then
    if debit then -- charged: nothing left
      return 0, 0, retry, reset
    end
    return 0, math.max(limit - w, 0), retry, reset
  end
  return 1, limit - w - cost, 0, reset
end

-- bucket decides as take.lua's token_bucket.
local function bucket(base, burst, num, den, window, cost, debit)
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
  allowed, t, ts, c = bucket_decide(burst, num, den, cost, now, t, ts, c, debit)
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
  local remaining = t
  if t < 0 then -- a debit's debt: nothing left
    remaining = 0
  end
  if allowed then
    return 1, remaining, 0, reset
  end
  local retry = window
  if cost <= burst then
    retry = ceil_div((cost - t) * den - c, num)
  end
  return 0, remaining, retry, reset
end

-- op decides the op whose parameters start at ARGV[a] (kind first) and
-- returns its four reply values.
local function op(base, a)
  local kind = tonumber(ARGV[a])
  local alg, debit = kind % 3, kind % 6 >= 3
  local limit, window = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local cost = tonumber(ARGV[a + 3])
  if cost > MAX then
    cost = MAX
  elseif cost < -MAX then
    cost = -MAX
  end
  if alg == 2 then
    return bucket(base, tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), window, cost, debit)
  end
  -- The window: Window-long from the epoch, or a calendar's period of
  -- now among B0..B5 (ARGV[a + 8] ..): [B(j), B(j + 1)), j the first of
  -- 1, 2, 3 whose period does not end by now.
  local ws, we, prev_start, next_end
  if kind >= 6 then
    local b = a + 8
    local j = 1
    while j < 3 and now >= ARGV[b + j + 1] * 1000 do
      j = j + 1
    end
    ws, we = ARGV[b + j] * 1000, ARGV[b + j + 1] * 1000
    prev_start, next_end = ARGV[b + j - 1] * 1000, ARGV[b + j + 2] * 1000
  else
    ws = now - now % window
    we, prev_start, next_end = ws + window, ws - window, ws + 2 * window
  end
  if alg == 0 then
    return fixed(base, limit, ws, we, cost)
  end
  return sliding(base, limit, ws, we, prev_start, next_end, cost, debit)
end

-- The ops: op i's parameters start at ARGV[at[i]], its veto is veto[i];
-- a calendar's op has six more.
-- debit[i]: op i is a debit's charge (not a peek, nor a refund, which
-- land only with the call).
local at, veto, debit, debits = {}, {}, {}, false
do
  local a = 3
  for i = 1, #KEYS do
    local kind = tonumber(ARGV[a])
    at[i], veto[i] = a, tonumber(ARGV[a + 7])
    debit[i] = kind % 6 >= 3 and tonumber(ARGV[a + 3]) > 0
    debits = debits or debit[i]
    a = a + 8
    if kind >= 6 then
      a = a + 6
    end
  end
end

-- redo charges the debit ops among first .. last again, on the state
-- staged so far, their answers standing as first given: a denied joint's,
-- or a rejected call's.
local function redo(first, last)
  for i = first, last do
    if debit[i] then
      op(KEYS[i], at[i])
    end
  end
end

-- close ends the joint running (its ops from joint_first): undone if one
-- of its ops was denied, then its debit ops charged again.
local joint_first, joint_write, joint_denied
local function close(last)
  local denied = joint_denied
  if denied then
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
  if denied and debits then
    redo(joint_first, last)
  end
end

local out = {tonumber(ARGV[1])}
local reject = false
local group, group_denied = 0, 0
local quota_denied -- the running veto 2 joint has a denied op
for i = 1, #KEYS do
  local v = veto[i]
  local joined = false -- the op continues a joint
  if v >= 8 then
    v, joined = v - 8, true
  else
    if undo then
      close(i - 1)
    end
    if v >= 4 then -- the first op of a joint
      v = v - 4
      undo, joint_first, joint_write, joint_denied = {}, i, #writes, false
    end
  end
  local allowed, remaining, retry, reset = op(KEYS[i], at[i])
  out[#out + 1] = allowed
  out[#out + 1] = remaining
  out[#out + 1] = retry
  out[#out + 1] = reset
  if allowed == 0 and undo then
    joint_denied = true
  end
  if v == 2 then
    if not joined then
      group, quota_denied = group + 1, false
    end
    if allowed == 0 and not quota_denied then
      group_denied, quota_denied = group_denied + 1, true
    end
  elseif v == 0 and allowed == 0 then
    reject = true
  end
end
if undo then
  close(#KEYS)
end
if group > 0 and group_denied == group then
  reject = true
end

if reject and debits then -- the debit ops alone are charged, each as alone
  counters, buckets, writes = {}, {}, {}
  redo(1, #KEYS)
  reject = false
end
if not reject then
  for _, w in ipairs(writes) do
    redis.call(unpack(w))
  end
end
return out
