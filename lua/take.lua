--[[
take.lua: independent rate-limit decisions, any number of them and of any
algorithms, in one script call. Each op is decided exactly as if it were
alone, in order (an op sees the writes of the ops before it on its key), at
Redis TIME or at the time it carries.

The ops come in groups: the ops of a group share a base key and are
consecutive in ARGV[2] (the caller puts the ops of one key together, in
their order; ops of different keys are independent, so their order is
free).

KEYS[g]  key of group g: the base key of its ops (ending in ':' and
         holding a {hash tag}), followed by a tail when its first op is a
         fixed window (S, the window start the caller expects) or a token
         bucket ('tokens'), so that the key of a group of one such op
         comes whole, without a concatenation. Window counters live at
         base .. S, S a window start in Unix seconds; a token bucket at
         base .. 'tokens'.
ARGV[1]  tag     an integer below 2^53, echoed as the reply's first element
                 so that the caller can tell its reply from any other
ARGV[2]  map     one byte per op: byte i is the number (1-based) of op i's
                 parameters among those that follow, so that the ops of a
                 call that share their parameters (most do: one rule, one
                 cost) send them once; empty when every op has set 1
ARGV[3]  groups  one byte per group: its number of ops (1..255), the first
                 group's ops first in map, and so on; empty when every
                 group has one op (never in cross-slot mode, below)
ARGV[4...] the parameters, one set after another, each opening with its
         kind, the algorithm's number, plus 3 when it is charged always
         (debit), plus 6 for a calendar's windows:
         fixed_window   0 (3), now, cost, S, E, X
                        6 (9), now, cost, B0 .. B5
         sliding_window 1 (4), now, limit, window, cost
                        7 (10), now, limit, cost, B0 .. B5
         token_bucket   2 (5), now, burst, num, den, window, cost
         now     decision time, Unix ms; 0 means Redis TIME (read once)
         limit   window capacity, milli-requests (0 <= limit <= 2^50)
         window  window length W, ms (windows: a positive multiple of 1000)
         cost    charge, milli-requests (|cost| <= 2^52); 0 peeks without
                 writing; below 0, a refund of -cost: always allowed, it
                 gives back to a window's count (this window's, for a
                 sliding window), not below 0, or to a bucket, refilled
                 first, not past burst; it writes only state that exists,
                 keeping its expiry (a window counter emptied is deleted;
                 a bucket made full is deleted, one still short expires
                 when full)
         burst   bucket capacity, milli-tokens (0 <= burst <= 2^50)
         num/den refill rate, milli-tokens per ms, (burst + num) * den < 2^53
         S, E, X a fixed window: its start and end, Unix seconds, as many
                 digits each (E = S + W / 1000), and its end in ms (X =
                 E * 1000), a new counter's expiry. The caller appended S to
                 the keys of groups whose first op has this set. With now
                 0, S is the caller's guess by its own clock: the window
                 is Redis' (TIME), and when Redis TIME is not in [S, E) the
                 script takes S back off KEYS[g] and appends its own
                 window start. With an explicit now, S is that time's.
         B0..B5  a calendar's windows (periods) around the caller's guess
                 of now's, Unix seconds: B2 its start
                 and B3 its end, B1 and B0 the two starts before, B4 and B5
                 the two ends after. The op's window is the one of [B1, B2),
                 [B2, B3) and [B3, B4) that holds now (the first or the last
                 when none does: a clock off by more than a window); the
                 caller appended B2 to a fixed window's group key, as S.
         debit   a charge that does not fit is made all the same: a sliding
                 window's count passes its limit (saturating at 2^52, the
                 previous window's uncapped), a bucket goes below zero (to
                 -burst at most); denied, it replies as any denial, its
                 retry_after after its own charge (a fixed window counts a
                 denied charge anyway: its debit changes nothing here)
Returns  {tag, secs, usec, then for each op in map's order:}
         fixed_window    the count after the op; nothing when the op before
                         it in its group has its parameter set (same key,
                         same window: its count is that op's plus its cost,
                         capped at 2^52, or less its refund, not below 0)
         sliding_window  w, the weighted count the op was decided on (it is
                         allowed when w + cost <= limit); when denied,
                         then retry_after, ms; for a refund, the weighted
                         count after it
         token_bucket    t * den + c after the op (t milli-tokens, carry c;
                         t + burst for a debit) when allowed,
                         -(t * den + c) - 2 when denied
         -1 (one integer, whatever the algorithm) for an op left undecided
         (cross-slot mode, below). secs and usec are the Redis TIME the
         ops with now 0 were decided at, as TIME gives them (0 and 0 if
         none). The caller derives the rest of each answer from these and
         the op (pkg/store/script.go): Redis formats one integer a decision
         rather than four.

A call on a Redis Cluster node whose keys span slots declares none
(numkeys 0: Redis refuses declared keys of several slots with CROSSSLOT
before the script runs) and sends them after groups instead, as
ARGV[4 .. 3 + n], n = #groups, the parameters following; the script then
needs the allow-cross-slot-keys flag (lua.go's TakeCrossSlot). A key this
node does not serve (its slot moved, or is moving) fails the first command
of its group, which this mode runs with redis.pcall: nothing of the group
is written and its ops are left undecided, so that the caller sends them
again where the Cluster says; the other groups are decided. (Every key of a
group shares the base's hash tag, and so its slot.)

State (every key has a TTL; a missing key is an empty window or a full
bucket; ws = now - now % W):
- fixed_window: KEYS[g] .. S, the count (integer string, saturating at
  2^52), expiring at ws + W (X), the window's end.
- sliding_window: this window's and the previous window's counters,
  integer strings, each expiring at its own ws + 2W (the next window's
  end).
- token_bucket: KEYS[g] .. 'tokens', struct.pack('<ddd', t, c, ts): t
  milli-tokens and carry c at ts (Unix ms), expiring at ts + max(fill, 1).

A fixed window counts every charge, denied ones too (as envoyproxy/ratelimit
does); a sliding window and a token bucket only allowed ones, and a debit's
(a denied bucket charge still leaves it refilled). Each changed key is written once
a call, and every number stays below 2^53.

The script runs in steps: the call's shape; the parameter sets, each read
once (P); the state of the whole call, read in one MGET; then each group
decided and written. Each algorithm has a part of its own, made only for a
call that has an op of it (fixed_window, sliding_window, token_bucket):
one decides a group of its one op from the state read and writes it; step
decides a run of its ops in a larger group on the group's cells, which
group writes. pkg/store/memory.go mirrors this script step for step,
fixed.lua decides fixed-window charges as it does for less, and atomic.lua
decides the same ops all or nothing on the same state. How a call runs and
what it costs Redis: docs/design.md, "The scripts".
]]

-- #include arith.lua

local call, tonumber, sub, byte = redis.call, tonumber, string.sub, string.byte
local MAXS = '4503599627370496' -- MAX as Redis takes it, without a sprintf a call

-- The call's shape: mb[i] is op i's set (nil: every op's is 1), gb[g]
-- group g's size (nil: every group has one op); group g's key is
-- K[koff + g], the parameters start at ARGV[a], and first runs the first
-- command of a group (redis.pcall in cross-slot mode).
local map, runs = ARGV[2], ARGV[3]
local nops, ngroups = #map, #runs
local mb, gb
if nops > 0 then
  mb = {byte(map, 1, nops)}
end
if ngroups > 0 then
  gb = {byte(runs, 1, ngroups)}
end
local K, koff, a, first = KEYS, 0, 4, call
local cross = #KEYS == 0
if cross then
  K, koff, a, first = ARGV, 3, 4 + ngroups, redis.pcall
elseif not gb then
  ngroups = #KEYS
end
if not mb then
  nops = ngroups
  if gb then
    nops = 0
    for g = 1, ngroups do
      nops = nops + gb[g]
    end
  end
end
local several = ngroups < nops -- a group has several ops
local ones = not several -- a group has one op
if several then
  for g = 1, ngroups do
    if gb[g] == 1 then
      ones = true
      break
    end
  end
end

-- Redis TIME, read once if an op has now 0: secs and usec as TIME gives
-- them, ms (Unix ms) once an op needs it as a number.
local secs, usec, ms = 0, 0, nil

-- The parameter sets, each read once: P[k] is set k (map's numbers), its
-- ARGV slots read into named locals (the header's names) and kept as
--   fixed_window   {0, cost, tail, cs, S, X, whole}
--   sliding_window {1, cost, tail, cs, cur, prev, elapsed, limit, window,
--                   g, wg, expiry, expiry string (false until needed),
--                   debit, next}
--   token_bucket   {2, cost, tail, now, burst, num, den, debit}
-- alg, cost and tail first: cost as a number, cs its string; tail the
-- length of what the caller appended to the base key of a group whose
-- first op has the set; whole whether that makes the op's key (S is
-- Redis' window). S and X are Redis' window when the caller's guess was
-- not; cur and prev the suffixes of this window's and the previous
-- window's counters, elapsed the ms into the window, g and wg arith.lua's
-- steps, expiry this window's counter's (Unix ms), next the next
-- window's steps {gn, wgn} when they differ (a calendar's), else false;
-- debit: charged always (kind's 3).
local P, np = {false}, 0 -- made with room for one set, as most calls have
local fixed, sliding, bucket = false, false, false -- the call has an op of it
local refunds = false -- a window op of the call gives back (cost < 0)
local steps, sliding_decide, weigh -- arith.lua's, made for sliding windows
local nargs = #ARGV
while a <= nargs do
  local kind, now = ARGV[a], ARGV[a + 1]
  local at_time = now == '0'
  if at_time and secs == 0 then
    local t = call('TIME')
    secs, usec = t[1], t[2]
  end
  local alg, debit, cal = kind, false, false
  if kind ~= '0' and kind ~= '1' and kind ~= '2' then -- kind = alg + 3 if debit + 6 if cal
    local k = tonumber(kind)
    alg, debit, cal = sub('012', k % 3 + 1, k % 3 + 1), k % 6 >= 3, k >= 6
  end
  if alg == '0' and not cal then
    local cs, lo, hi, x = ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
    local cost = 1000 -- one request's, without parsing
    if cs ~= '1000' then
      cost = tonumber(cs)
      refunds = refunds or cost < 0
    end
    local suffix, whole = lo, true
    if at_time and secs ~= lo and not (#secs == #lo and #lo == #hi and lo < secs and secs < hi) then
      -- The caller's window is not Redis': take Redis'.
      if not ms then
        ms = tonumber(secs) * 1000 + (usec - usec % 1000) / 1000
      end
      local window = (hi - lo) * 1000
      local ws = ms - ms % window
      suffix, x, whole = int(ws / 1000), int(ws + window), false
    end
    np = np + 1
    P[np] = {0, cost, #lo, cs, suffix, x, whole}
    fixed = true
    a = a + 6
  else
    if at_time then
      if not ms then
        ms = tonumber(secs) * 1000 + (usec - usec % 1000) / 1000
      end
      now = ms
    else
      now = tonumber(now)
    end
    if cal then -- a calendar's periods, B0 .. B5 from ARGV[b]: take now's, [B(j), B(j + 1))
      local b = a + 3 -- a fixed window's
      if alg == '1' then
        b = a + 4
      end
      local j = 1
      if now >= ARGV[b + 2] * 1000 then
        j = 2
        if now >= ARGV[b + 3] * 1000 then
          j = 3
        end
      end
      cal = b + j -- the period's start, ARGV[cal]
    end
    if alg == '0' then -- a calendar's
      local cs = ARGV[a + 2]
      local cost = 1000
      if cs ~= '1000' then
        cost = tonumber(cs)
        refunds = refunds or cost < 0
      end
      np = np + 1
      P[np] = {0, cost, #ARGV[a + 5], cs, ARGV[cal], ARGV[cal + 1] .. '000', cal == a + 5}
      fixed = true
      a = a + 9
    elseif alg == '1' then
      local limit, window, cs, ws, cur, prev, expiry
      if cal then
        limit, cs = tonumber(ARGV[a + 2]), ARGV[a + 3]
        cur, prev = ARGV[cal], ARGV[cal - 1]
        ws = cur * 1000
        window, expiry = ARGV[cal + 1] * 1000 - ws, ARGV[cal + 2] * 1000
        a = a + 10
      else
        limit, window, cs = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), ARGV[a + 4]
        ws = now - now % window
        if window == 1000 and at_time then
          cur = secs -- TIME's seconds: the window's start, already a string
        else
          cur = int(ws / 1000)
        end
        prev, expiry = int((ws - window) / 1000), ws + 2 * window
        a = a + 5
      end
      local cost = 1000
      if cs ~= '1000' then
        cost = tonumber(cs)
        refunds = refunds or cost < 0
      end
      if not steps then
        steps, sliding_decide, weigh = sliding_arith()
      end
      local g, wg = steps(window)
      local next = false
      if cal then
        next = {steps(expiry - ws - window)}
      end
      np = np + 1
      P[np] = {1, cost, 0, cs, cur, prev, now - ws, limit, window, g, wg, expiry, false, debit, next}
      sliding = true
    else
      local burst, num, den, cs = ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 6]
      local cost = 1000
      if cs ~= '1000' then
        cost = tonumber(cs)
      end
      np = np + 1
      P[np] = {2, cost, 6, now, tonumber(burst), tonumber(num), tonumber(den), debit}
      bucket = true
      a = a + 7
    end
  end
end

-- out is the reply, made about as long as it will be, so that it seldom
-- grows (it ends at its first nil).
local out = {ARGV[1], secs, usec, unpack(K, koff + 1, koff + ngroups)}

-- A larger group's state is held in cells, one a key: {key, value read
-- (false: missing), count before the call (windows), change so far, the
-- string of its one change (while there is exactly one, of an op's whole
-- cost), expiry of its first increase, bucket t, c, ts and the set of its
-- last charge (for its expiry, computed when it is written), changed
-- (a bucket), window (a window counter whose count was read)}. An op
-- that changes a window cell by d adds d to its change, and keeps the
-- string of its one change while there is one of its whole cost (its cs;
-- else false) and the expiry of its first increase.
--
-- keys_of names the keys op p reads before it decides, on base key b: a
-- sliding window's two counters, a bucket, a refunded fixed window's
-- counter (whose count the refund needs), none for a fixed window's
-- charge (made for a call that reads).
local keys_of
if several and (sliding or bucket or refunds) then -- else no op reads
  keys_of = function(p, b)
    local alg = p[1]
    if alg == 1 then
      return b .. p[5], b .. p[6]
    elseif alg == 2 then
      return b .. BUCKET
    elseif p[2] < 0 then
      return b .. p[5]
    end
  end
end

-- fixed_window: a counter a window, charged denied or not.
--
-- fixed_one(p, key) decides a group of one op on its key (KEYS[g]): a
-- charge's INCRBY returns the count, a peek or refund GETs it; it returns
-- the count after, -1 when the node does not serve the key.
--
-- fixed_step(p, c, known, k, n, pending) decides a run of k ops of set p
-- on cell c, whose count is known when the call read it (a refund's, or a
-- sliding window's on the same key); else their charges join the cell's
-- INCRBY, and the count, known once it is written, goes to out[n + 1]
-- then (pending: three values a run). The first op of the run replies, the
-- others nothing; it returns the new n.
local fixed_one, fixed_step
if fixed then
  if ones then
    fixed_one = function(p, key)
      local cost, tail, cs, suffix, expiry, whole = p[2], p[3], p[4], p[5], p[6], p[7]
      if not whole then -- the caller's guess of the window was not Redis'
        key = sub(key, 1, #key - tail) .. suffix
      end
      local count = -1
      if cost > 0 then
        local v = first('INCRBY', key, cs)
        if not (cross and type(v) == 'table') then
          count = v
          if v == cost then
            call('PEXPIREAT', key, expiry)
          elseif v > MAX then
            count = MAX
            call('SET', key, MAXS, 'KEEPTTL')
          end
        end
      else -- a peek, or a refund: the count, less it, not below 0
        local v = first('GET', key)
        if not (cross and type(v) == 'table') then
          count = v and tonumber(v) or 0
          if cost < 0 and count > 0 then
            count = count + cost
            if count <= 0 then -- emptied: as if never written
              count = 0
              call('DEL', key)
            else
              call('INCRBY', key, cs)
            end
          end
        end
      end
      return count
    end
  end

  if several then
    fixed_step = function(p, c, known, k, n, pending)
      local cost, cs, expiry = p[2], p[4], p[6]
      n = n + 1
      if known then
        for o = 1, k do
          local was = c[3] + c[4]
          local count = was + cost
          if count > MAX then
            count = MAX
          elseif count < 0 then
            count = 0
          end
          if count ~= was then -- the cell's change: see cells, above
            local d = count - was
            if c[5] == nil and d == cost then
              c[5] = cs
            else
              c[5] = false
            end
            if d > 0 and not c[6] then
              c[6] = expiry
            end
            c[4] = c[4] + d
          end
          if o == 1 then
            out[n] = count
          end
        end
        return n
      end
      for o = 1, k do
        if cost > 0 then -- the cell's change, of cost: the hot path
          if c[5] == nil then
            c[5], c[6] = cs, expiry
          else
            c[5] = false
          end
          c[4] = c[4] + cost
        end
        if o == 1 then
          pending[#pending + 1], pending[#pending + 2], pending[#pending + 3] = n, c, c[4]
        end
      end
      return n
    end
  end
end

-- sliding_window: this window's count and the previous one's, weighed.
--
-- sliding_one(p, key, v, cur, prev) decides a group of one op on this
-- window's counter (at key, holding v and so cur) and the previous one's
-- count prev, and charges or gives back; it returns the weighted count,
-- and retry_after when denied.
--
-- sliding_step(p, c, c2, k, n) decides a run of k ops of set p on cells c
-- (this window's) and c2 (the previous one's), replying from out[n + 1];
-- it returns the new n.
local sliding_one, sliding_step
if sliding then
  if ones then
    sliding_one = function(p, key, v, cur, prev)
      local cost, cs, elapsed, limit, window, g, wg, debit = p[2], p[4], p[7], p[8], p[9], p[10], p[11], p[14]
      if prev > limit and not debit then
        prev = limit
      end
      if cost < 0 then -- a refund: this window's count drops, not below 0
        local was = cur
        cur = cur + cost
        if cur < 0 then
          cur = 0
        end
        if cur == 0 and was > 0 then -- emptied: as if never written
          call('DEL', key)
        elseif cur ~= was then
          call('INCRBY', key, cs)
        end
        return weigh(g, wg, elapsed, cur, prev)
      end
      local w, retry = sliding_decide(limit, window, g, wg, cost, elapsed, cur, prev, debit, p[15])
      if cost > 0 and (not retry or debit) then
        if cur + cost > 4503599627370496 then -- a debit's count saturates at MAX (the key exists)
          call('SET', key, '4503599627370496', 'KEEPTTL') -- MAXS: literals, as upvalues cost allocations
        else
          call('INCRBY', key, cs)
        end
        if not v then
          local x = p[13]
          if not x then
            x = int(p[12])
            p[13] = x
          end
          call('PEXPIREAT', key, x)
        end
      end
      return w, retry
    end
  end

  if several then
    sliding_step = function(p, c, c2, k, n)
      local cost, cs, elapsed, limit, window, g, wg, debit = p[2], p[4], p[7], p[8], p[9], p[10], p[11], p[14]
      for _ = 1, k do
        local prev = c2[3] + c2[4]
        if prev > limit and not debit then
          prev = limit
        end
        n = n + 1
        if cost < 0 then -- a refund: this window's count drops, not below 0
          local was = c[3] + c[4]
          local cur = was + cost
          if cur < 0 then
            cur = 0
          end
          if cur ~= was then -- the cell's change, a decrease
            if c[5] == nil and cur - was == cost then
              c[5] = cs
            else
              c[5] = false
            end
            c[4] = c[4] + (cur - was)
          end
          out[n] = weigh(g, wg, elapsed, cur, prev)
        else
          local was = c[3] + c[4]
          local w, retry = sliding_decide(limit, window, g, wg, cost, elapsed, was, prev, debit, p[15])
          out[n] = w
          if retry then
            n = n + 1
            out[n] = retry
          end
          if cost > 0 and (not retry or debit) then -- the cell's change, of cost (a debit's saturates)
            local d = cost
            if was + d > MAX then
              d = MAX - was
            end
            if c[5] == nil and d == cost then
              c[5] = cs
            else
              c[5] = false
            end
            if not c[6] then
              local x = p[13]
              if not x then
                x = int(p[12])
                p[13] = x
              end
              c[6] = x
            end
            c[4] = c[4] + d
          end
        end
      end
      return n
    end
  end
end

-- token_bucket: tokens refilled continuously, a charge taken if they allow.
--
-- bucket_one(p, key, v) decides a group of one op on the bucket at key,
-- holding v, and writes it; bucket_step(p, b, k, n) decides a run of k ops
-- of set p on cell b, replying from out[n + 1], and returns the new n
-- (group writes the cell). Each returns or replies t * den + c when
-- allowed, -(t * den + c) - 2 when denied. bucket_write(key, existed, t,
-- c, ts, burst, num, den) writes a bucket's state (t false: full, deleted
-- if it existed), expiring when it is full again (arith.lua's expiry,
-- written out), formatting the state and the expiry only when they differ
-- from the last.
local bucket_one, bucket_step, bucket_write
if bucket then
  local decide = bucket_arith()
  local lt, lc, lts, lv, lx, lxs
  bucket_write = function(key, existed, t, c, ts, burst, num, den)
    if not t then
      if existed then
        call('DEL', key)
      end
      return
    end
    if t ~= lt or c ~= lc or ts ~= lts then
      lt, lc, lts, lv = t, c, ts, struct.pack(STATE, t, c, ts)
    end
    local f = (burst - t) * den - c -- ms until full: ceil(f / num), 1 at least as t < burst
    local r = f % num
    f = (f - r) / num
    if r > 0 then
      f = f + 1
    end
    if ts + f ~= lx then
      lx = ts + f
      lxs = int(lx)
    end
    call('SET', key, lv, 'PXAT', lxs, 'GET') -- GET: a bulk reply, no table
  end

  if ones then
    bucket_one = function(p, key, v)
      local cost, now, burst, num, den, debit = p[2], p[4], p[5], p[6], p[7], p[8]
      local t, c, ts = burst, 0, now
      if v then
        t, c, ts = struct.unpack(STATE, v)
      end
      local allowed
      allowed, t, ts, c = decide(burst, num, den, cost, now, t, ts, c, debit)
      if cost ~= 0 then -- a charge or a refund leaves its state
        if t >= burst then
          bucket_write(key, v, false)
        else
          bucket_write(key, v, t, c, ts, burst, num, den)
        end
      end
      if debit then -- t may be down to -burst
        t = t + burst
      end
      if allowed then
        return t * den + c
      end
      return -(t * den + c) - 2
    end
  end

  if several then
    bucket_step = function(p, b, k, n)
      local cost, now, burst, num, den, debit = p[2], p[4], p[5], p[6], p[7], p[8]
      for _ = 1, k do
        local t, c, ts = b[7], b[8], b[9]
        if t == nil then -- the state stored
          t = false
          if b[2] then
            t, c, ts = struct.unpack(STATE, b[2])
          end
          b[7], b[8], b[9] = t, c, ts
        end
        if not t then -- full: as a missing key reads
          t, c, ts = burst, 0, now
        end
        local allowed
        allowed, t, ts, c = decide(burst, num, den, cost, now, t, ts, c, debit)
        n = n + 1
        local u = t -- the reply's t: shifted by burst for a debit, whose t may be down to -burst
        if debit then
          u = t + burst
        end
        if allowed then
          out[n] = u * den + c
        else
          out[n] = -(u * den + c) - 2
        end
        if cost ~= 0 then -- a charge or refund leaves its state; a peek changes nothing
          b[11] = true
          if t >= burst then
            b[7] = false
          else
            b[7], b[8], b[9], b[10] = t, c, ts, p -- its expiry, from its set, when written
          end
        end
      end
      return n
    end
  end
end

-- Read the state of every group at once (not in cross-slot mode, where
-- each group reads its own): rk lists the keys, in the order the groups
-- will take them. A group of one sliding window reads its counters at
-- rk[r + 1], rk[r + 2], of one bucket at rk[r + 1]; a larger group reads
-- its distinct keys in the order its ops first name them (keys_of).
local rk, rv, nr = {false, false}, nil, 0 -- room for a call of one op
if (sliding or bucket or refunds) and not cross then
  local i = 1
  for g = 1, ngroups do
    local cnt = gb and gb[g] or 1
    local p = P[mb and mb[i] or 1]
    if cnt == 1 then
      if p[1] == 1 then
        local k = K[koff + g]
        rk[nr + 1], rk[nr + 2] = k .. p[5], k .. p[6]
        nr = nr + 2
      elseif p[1] == 2 then
        nr = nr + 1
        rk[nr] = K[koff + g]
      end
    else
      local b, seen = K[koff + g], {}
      if p[3] > 0 then
        b = sub(b, 1, #b - p[3])
      end
      for o = i, i + cnt - 1 do
        local k1, k2 = keys_of(P[mb and mb[o] or 1], b)
        if k1 and not seen[k1] then
          nr = nr + 1
          rk[nr], seen[k1] = k1, true
        end
        if k2 and not seen[k2] then
          nr = nr + 1
          rk[nr], seen[k2] = k2, true
        end
      end
    end
    i = i + cnt
  end
  if nr > 2 then
    rv = call('MGET', unpack(rk))
  elseif nr == 2 then -- a call of one op: unpack is a C call
    rv = call('MGET', rk[1], rk[2])
  elseif nr == 1 then
    rv = call('MGET', rk[1])
  end
end

-- group decides the ops i .. j (more than one) of a group on base key b,
-- the reply going to out from n + 1, and returns the new n and at: where
-- its values start in rv (the MGET's); in cross-slot mode it reads its
-- keys itself. It is take.lua's general path, made only for a call that
-- has a group of several ops.
local group
if several then
  group = function(b, i, j, n, at)
    local cells, order = {}, {}
    local function cell(key)
      local c = cells[key]
      if not c then
        c = {key, false, false, 0, nil, false, nil, 0, 0, 0, false, false}
        cells[key] = c
        order[#order + 1] = c
      end
      return c
    end
    -- Name the cells read, in rk's order, and take their values.
    local reads = {}
    local prev = 0
    for o = i, j do
      local s = mb and mb[o] or 1
      if s ~= prev and keys_of then -- else its cells are named, or none are read
        local p = P[s]
        local k1, k2 = keys_of(p, b)
        if k1 then
          local c1 = cell(k1)
          c1[12] = p[1] ~= 2
          if not reads[c1] then
            reads[#reads + 1], reads[c1] = c1, true
          end
          if k2 then
            local c2 = cell(k2)
            c2[12] = true
            if not reads[c2] then
              reads[#reads + 1], reads[c2] = c2, true
            end
          end
        end
      end
      prev = s
    end
    if #reads > 0 then
      local v
      if cross then
        local keys = {}
        for k = 1, #reads do
          keys[k] = reads[k][1]
        end
        v = first('MGET', unpack(keys))
        if v.err then -- not this node's slot: nothing decided
          for _ = i, j do
            n = n + 1
            out[n] = -1
          end
          return n, at
        end
      else
        v = {unpack(rv, at + 1, at + #reads)}
        at = at + #reads
      end
      for k = 1, #reads do
        local c = reads[k]
        c[2] = v[k]
        if c[12] then
          c[3] = v[k] and tonumber(v[k]) or 0
        end
      end
    end

    -- Decide in order, a run of ops of one set at a time.
    local pending = {} -- places in out, cells and changes of fixed runs
    local o = i
    while o <= j do
      local s = mb and mb[o] or 1
      local e = o -- the run: ops o .. e
      while e < j and (mb and mb[e + 1] or 1) == s do
        e = e + 1
      end
      local p, k = P[s], e - o + 1
      local alg = p[1]
      if alg == 0 then
        local c = cell(b .. p[5])
        n = fixed_step(p, c, reads[c], k, n, pending)
      elseif alg == 1 then
        n = sliding_step(p, cells[b .. p[5]], cells[b .. p[6]], k, n)
      else
        n = bucket_step(p, cells[b .. BUCKET], k, n)
      end
      o = e + 1
    end

    -- Write each changed cell once; a fixed window's count before the
    -- call comes from its INCRBY (or a GET when only peeked at).
    for k = 1, #order do
      local c = order[k]
      local key, d = c[1], c[4]
      if c[11] then -- a bucket charged, its expiry from the set of its last charge
        local t, q = c[7], c[10]
        if t then
          bucket_write(key, c[2], t, c[8], c[9], q[5], q[6], q[7])
        else
          bucket_write(key, c[2], false)
        end
      elseif reads[c] then
        -- Decided in order, its count stayed within [0, 2^52]: one INCRBY
        -- sets it, and a counter that did not exist gets its expiry; one
        -- that a refund emptied is deleted (as if never written). A
        -- bucket read (not a window's, c[12]) was only peeked at.
        if not c[12] then -- nothing to write
        elseif c[3] + d == 0 then
          if c[2] then
            call('DEL', key)
          end
        elseif d ~= 0 then
          call('INCRBY', key, c[5] or int(d))
          if not c[2] then
            call('PEXPIREAT', key, c[6])
          end
        end
      elseif d > 0 then
        if d > MAX then
          d = MAX
        end
        local r = first('INCRBY', key, c[5] or int(d))
        if cross and type(r) == 'table' then
          c[3] = false
        else
          c[3] = r - d
          if r == d then
            call('PEXPIREAT', key, c[6])
          elseif r > MAX then
            call('SET', key, MAXS, 'KEEPTTL')
          end
        end
      else
        local v = first('GET', key)
        if cross and type(v) == 'table' then
          c[3] = false
        else
          c[3] = v and tonumber(v) or 0
        end
      end
    end
    for f = 1, #pending, 3 do
      local c = pending[f + 1]
      local count = -1
      if c[3] then
        count = c[3] + pending[f + 2]
        if count > MAX then
          count = MAX
        end
      end
      out[pending[f]] = count
    end
    return n, at
  end
end

-- Decide, group by group. A group of one op needs no table: its state is
-- at rv[r + 1] (and rv[r + 2]), or read here in cross-slot mode.
local n, i, r = 3, 1, 0
for g = 1, ngroups do
  local cnt = gb and gb[g] or 1
  local p = P[mb and mb[i] or 1]
  local alg = p[1]
  if cnt > 1 then
    local b = K[koff + g]
    if p[3] > 0 then
      b = sub(b, 1, #b - p[3])
    end
    n, r = group(b, i, i + cnt - 1, n, r)
  elseif alg == 0 then
    n = n + 1
    out[n] = fixed_one(p, K[koff + g])
  else
    local k1, v1, v2
    if not cross then
      k1, v1 = rk[r + 1], rv[r + 1]
      if alg == 1 then
        v2 = rv[r + 2]
        r = r + 2
      else
        r = r + 1
      end
    else
      local v
      if alg == 1 then
        local b = K[koff + g]
        k1 = b .. p[5]
        v = first('MGET', k1, b .. p[6])
      else
        k1 = K[koff + g]
        v = first('MGET', k1)
      end
      if v.err then
        k1 = false
      else
        v1, v2 = v[1], v[2]
      end
    end
    n = n + 1
    if not k1 then
      out[n] = -1
    elseif alg == 1 then
      local w, retry = sliding_one(p, k1, v1, v1 and tonumber(v1) or 0, v2 and tonumber(v2) or 0)
      out[n] = w
      if retry then
        n = n + 1
        out[n] = retry
      end
    else
      out[n] = bucket_one(p, k1, v1)
    end
  end
  i = i + cnt
end
out[n + 1] = nil
return out
