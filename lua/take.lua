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
ARGV[4...] the parameters, one set after another:
         fixed_window   0, now, cost, S, E, X
         sliding_window 1, now, limit, window, cost
         token_bucket   2, now, burst, num, den, window, cost
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
Returns  {tag, secs, usec, then for each op in map's order:}
         fixed_window    the count after the op; nothing when the op before
                         it in its group has its parameter set (same key,
                         same window: its count is that op's plus its cost,
                         capped at 2^52, or less its refund, not below 0)
         sliding_window  w, the weighted count the op was decided on (it is
                         allowed when w + cost <= limit); when denied,
                         then retry_after, ms; for a refund, the weighted
                         count after it
         token_bucket    t * den + c after the op (t milli-tokens, carry c)
                         when allowed, -(t * den + c) - 2 when denied
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
  2^52), expiring at ws + W (X).
- sliding_window: this window's and the previous window's counters,
  integer strings, each expiring at its own ws + 2W.
- token_bucket: KEYS[g] .. 'tokens', struct.pack('<ddd', t, c, ts): t
  milli-tokens and carry c at ts (Unix ms), expiring at ts + max(fill, 1).

A fixed window counts every charge, denied ones too (as envoyproxy/ratelimit
does); a sliding window and a token bucket only allowed ones (a denied
bucket charge still leaves it refilled). Each changed key is written once
a call, and every number stays below 2^53;
pkg/store/memory.go mirrors this script step for step, fixed.lua decides
fixed-window charges as it does for less, and atomic.lua decides the same
ops all or nothing on the same state. How a call runs and what it costs
Redis: docs/design.md, "The scripts".
]]

-- #include arith.lua

local call, tonumber, sub, byte = redis.call, tonumber, string.sub, string.byte
local MAXS = '4503599627370496' -- MAX as Redis takes it, without a sprintf a call

-- mb[i] is op i's set (nil: every op's is 1), gb[g] group g's size (nil:
-- every group has one op).
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

-- Redis TIME, read once if an op has now 0: secs and usec as TIME gives
-- them, clock in ms once an op needs it as a number.
local secs, usec, clock = 0, 0, nil

-- The parameter sets, each converted once, the key suffixes and expiries
-- as the strings Redis takes. P[k] = {alg, now, cost, tail, whole, ...}:
-- tail is the length of what the caller appended to the base key of a
-- group whose first op has the set, whole whether that makes the op's
-- key; then
--   fixed:   cost string, suffix, expiry
--   sliding: cost string, suffix, expiry, previous suffix, elapsed, limit,
--            window, g, wg
--   bucket:  burst, num, den
-- Costs come within [-2^52, 2^52]; one request's needs no parsing.
local P = {}
local steps, sliding_decide, weigh, bucket_decide, bucket_expiry
local refunds = false -- a window op of the call gives back (cost < 0)
local nargs = #ARGV
while a <= nargs do
  local alg, now = ARGV[a], ARGV[a + 1]
  local redis_time = now == '0'
  if redis_time and secs == 0 then
    local t = call('TIME')
    secs, usec = t[1], t[2]
  end
  if alg == '0' then
    local cs, lo, hi, x = ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
    local cost = 1000
    if cs ~= '1000' then
      cost = tonumber(cs)
      refunds = refunds or cost < 0
    end
    local suffix, whole = lo, true
    if redis_time and secs ~= lo and not (#secs == #lo and #lo == #hi and lo < secs and secs < hi) then
      -- The caller's window is not Redis': take Redis'.
      if not clock then
        clock = tonumber(secs) * 1000 + (usec - usec % 1000) / 1000
      end
      local window = (hi - lo) * 1000
      local ws = clock - clock % window
      suffix, x, whole = int(ws / 1000), int(ws + window), false
    end
    P[#P + 1] = {0, 0, cost, #lo, whole, cs, suffix, x}
    a = a + 6
  else
    if redis_time then
      if not clock then
        clock = tonumber(secs) * 1000 + (usec - usec % 1000) / 1000
      end
      now = clock
    else
      now = tonumber(now)
    end
    if alg == '2' then
      if not bucket_decide then
        bucket_decide, bucket_expiry = bucket_arith()
      end
      local cs = ARGV[a + 6]
      local cost = 1000
      if cs ~= '1000' then
        cost = tonumber(cs)
      end
      P[#P + 1] = {2, now, cost, 6, true, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])}
      a = a + 7
    else
      local window, cs = tonumber(ARGV[a + 3]), ARGV[a + 4]
      local cost = 1000
      if cs ~= '1000' then
        cost = tonumber(cs)
        refunds = refunds or cost < 0
      end
      local ws = now - now % window
      local suffix
      if window == 1000 and redis_time then
        suffix = secs -- TIME's seconds: the window's start, already a string
      else
        suffix = int(ws / 1000)
      end
      if not steps then
        steps, sliding_decide, weigh = sliding_arith()
      end
      local g, wg = steps(window)
      P[#P + 1] = {1, now, cost, 0, false, cs, suffix, int(ws + 2 * window), int((ws - window) / 1000),
        now - ws, tonumber(ARGV[a + 2]), window, g, wg}
      a = a + 5
    end
  end
end

-- out is made about as long as the reply will be, so that it seldom grows
-- (the reply ends at its first nil).
local out = {ARGV[1], secs, usec, unpack(K, koff + 1, koff + ngroups)}

-- Read the state of every group at once (not in cross-slot mode, where
-- each group reads its own): rk lists the keys, in the order the groups
-- will take them. A group of one sliding window reads its counters at
-- rk[r + 1], rk[r + 2], of one bucket at rk[r + 1]; a larger group reads
-- its distinct keys in the order its ops first name them.
local rk, rv, nr = {}, nil, 0
if (steps or bucket_decide or refunds) and not cross then
  local i = 1
  for g = 1, ngroups do
    local cnt = gb and gb[g] or 1
    if cnt == 1 then
      local p = P[mb and mb[i] or 1]
      if p[1] == 1 then
        local k = K[koff + g]
        rk[nr + 1], rk[nr + 2] = k .. p[7], k .. p[9]
        nr = nr + 2
      elseif p[1] == 2 then
        nr = nr + 1
        rk[nr] = K[koff + g]
      end
    else
      local b, seen = K[koff + g], {}
      local tail = P[mb and mb[i] or 1][4]
      if tail > 0 then
        b = sub(b, 1, #b - tail)
      end
      for o = i, i + cnt - 1 do
        local p = P[mb and mb[o] or 1]
        local k1, k2
        if p[1] == 1 then
          k1, k2 = b .. p[7], b .. p[9]
        elseif p[1] == 2 then
          k1 = b .. BUCKET
        elseif p[3] < 0 then -- a fixed window's refund needs its count
          k1 = b .. p[7]
        end
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
  if nr > 0 then
    rv = call('MGET', unpack(rk))
  end
end

-- bucket_write writes a bucket's state after its group (t false: full),
-- formatting the state and expiry only when they differ from the last.
local bucket_write
if bucket_decide then
  local lt, lc, lts, lv, lx, lxs
  bucket_write = function(key, existed, t, c, ts, x)
    if not t then
      if existed then
        call('DEL', key)
      end
      return
    end
    if t ~= lt or c ~= lc or ts ~= lts then
      lt, lc, lts, lv = t, c, ts, struct.pack(STATE, t, c, ts)
    end
    if x ~= lx then
      lx, lxs = x, int(x)
    end
    call('SET', key, lv, 'PXAT', lxs, 'GET') -- GET: a bulk reply, no table
  end
end

-- group decides the ops i .. j (more than one) of group g on base b, the
-- reply going to out from n + 1, and returns the new n and at: where its
-- values start in rv (the MGET's); in cross-slot mode it reads its keys
-- itself. It is take.lua's general path, made only for a call that has
-- a group of several ops.
local group
if ngroups < nops then -- a group has several ops
  group = function(b, i, j, n, at)
    -- A cell is one key: {key, value read (false: missing), count before
    -- the call (windows), change so far, the string of its one change
    -- (while there is exactly one, of an op's whole cost), expiry of its
    -- first increase, bucket t, c, ts and the set of its last charge (for
    -- its expiry, computed when it is written), changed, window}.
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
    -- change adds d (not 0) to a window cell, by an op whose whole cost
    -- string is cs when d is its cost (else cs is false), exp its expiry.
    local function change(c, d, cs, exp)
      if c[5] == nil then
        c[5] = cs
      else
        c[5] = false
      end
      if d > 0 and not c[6] then
        c[6] = exp
      end
      c[4] = c[4] + d
    end
    -- Name the cells read, in rk's order, and take their values.
    local reads = {}
    local prev = 0
    for o = i, j do
      local s = mb and mb[o] or 1
      local p = P[s]
      local alg = p[1]
      if s == prev then -- its cells are named
        alg = -1
      end
      prev = s
      if alg == 1 then
        local c1, c2 = cell(b .. p[7]), cell(b .. p[9])
        c1[12], c2[12] = true, true
        if not reads[c1] then
          reads[#reads + 1], reads[c1] = c1, true
        end
        if not reads[c2] then
          reads[#reads + 1], reads[c2] = c2, true
        end
      elseif alg == 2 or alg == 0 and p[3] < 0 then
        local c = cell(b .. (alg == 2 and BUCKET or p[7]))
        c[12] = alg == 0
        if not reads[c] then
          reads[#reads + 1], reads[c] = c, true
        end
      end
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

    -- Decide in order. A fixed op replies its count once its cell is
    -- written; one that follows an op of its set replies nothing (the
    -- caller adds its cost to that op's count).
    local fixed = {} -- places in out, cells and charges of fixed ops
    local c, c2, rc -- the cells of the op before, while ops share a set
    prev = 0
    for o = i, j do
      local s = mb and mb[o] or 1
      local p = P[s]
      local alg = p[1]
      if alg == 0 then
        if s ~= prev then
          c = cell(b .. p[7])
          rc = reads[c]
        end
        local cost = p[3]
        if rc then -- its count is known (a refund, or a sliding window's)
          local was = c[3] + c[4]
          local count = was + cost
          if count > MAX then
            count = MAX
          elseif count < 0 then
            count = 0
          end
          if count ~= was then
            change(c, count - was, count - was == cost and p[6], p[8])
          end
          if s ~= prev then
            n = n + 1
            out[n] = count
          end
        else
          if cost > 0 then -- change(c, cost, p[6], p[8]), written out: the hot path
            if c[5] == nil then
              c[5], c[6] = p[6], p[8]
            else
              c[5] = false
            end
            c[4] = c[4] + cost
          end
          if s ~= prev then
            n = n + 1
            fixed[#fixed + 1], fixed[#fixed + 2], fixed[#fixed + 3] = n, c, c[4]
          end
        end
      elseif alg == 1 then
        if s ~= prev then
          c, c2 = cells[b .. p[7]], cells[b .. p[9]]
        end
        local cost, limit = p[3], p[11]
        local pc = c2[3] + c2[4]
        if pc > limit then
          pc = limit
        end
        n = n + 1
        if cost < 0 then -- a refund: this window's count drops, not below 0
          local was = c[3] + c[4]
          local cur = was + cost
          if cur < 0 then
            cur = 0
          end
          if cur ~= was then
            change(c, cur - was, cur - was == cost and p[6], p[8])
          end
          out[n] = weigh(p[13], p[14], p[10], cur, pc)
        else
          local w, retry = sliding_decide(limit, p[12], p[13], p[14], cost, p[10], c[3] + c[4], pc)
          out[n] = w
          if retry then
            n = n + 1
            out[n] = retry
          elseif cost > 0 then -- change(c, cost, p[6], p[8]), written out
            if c[5] == nil then
              c[5] = p[6]
            else
              c[5] = false
            end
            if not c[6] then
              c[6] = p[8]
            end
            c[4] = c[4] + cost
          end
        end
      else
        local now, cost, burst, num, den = p[2], p[3], p[6], p[7], p[8]
        if s ~= prev then
          c = cells[b .. BUCKET]
        end
        local t, tc, ts = c[7], c[8], c[9]
        if t == nil then -- the state stored
          t = false
          if c[2] then
            t, tc, ts = struct.unpack(STATE, c[2])
          end
          c[7], c[8], c[9] = t, tc, ts
        end
        if not t then -- full: as a missing key reads
          t, tc, ts = burst, 0, now
        end
        local allowed
        allowed, t, ts, tc = bucket_decide(burst, num, den, cost, now, t, ts, tc)
        n = n + 1
        if allowed then
          out[n] = t * den + tc
        else
          out[n] = -(t * den + tc) - 2
        end
        if cost ~= 0 then -- a charge or refund leaves its state; a peek changes nothing
          c[11] = true
          if t >= burst then
            c[7] = false
          else
            c[7], c[8], c[9], c[10] = t, tc, ts, p -- its expiry, from its set, when written
          end
        end
      end
      prev = s
    end

    -- Write each changed cell once; a fixed window's count before the
    -- call comes from its INCRBY (or a GET when only peeked at).
    for k = 1, #order do
      local c = order[k]
      local key, d = c[1], c[4]
      if c[11] then
        local t, q = c[7], c[10]
        bucket_write(key, c[2], t, c[8], c[9], t and bucket_expiry(q[6], q[7], q[8], t, c[8], c[9]))
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
    for f = 1, #fixed, 3 do
      local c = fixed[f + 1]
      local count = -1
      if c[3] then
        count = c[3] + fixed[f + 2]
        if count > MAX then
          count = MAX
        end
      end
      out[fixed[f]] = count
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
  if cnt > 1 then
    local b = K[koff + g]
    if p[4] > 0 then
      b = sub(b, 1, #b - p[4])
    end
    n, r = group(b, i, i + cnt - 1, n, r)
  elseif p[1] == 0 then
    local key, cost, count = K[koff + g], p[3], -1
    if not p[5] then -- the caller's guess of the window was not Redis'
      key = sub(key, 1, #key - p[4]) .. p[7]
    end
    if cost > 0 then
      local v = first('INCRBY', key, p[6])
      if not (cross and type(v) == 'table') then
        count = v
        if v == cost then
          call('PEXPIREAT', key, p[8])
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
          local was = count
          count = count + cost
          if count <= 0 then -- emptied: as if never written
            count = 0
            call('DEL', key)
          else
            call('INCRBY', key, p[6])
          end
        end
      end
    end
    n = n + 1
    out[n] = count
  else
    local alg = p[1]
    local k1, k2, v1, v2
    if not cross then
      k1, v1 = rk[r + 1], rv[r + 1]
      if alg == 1 then
        k2, v2 = rk[r + 2], rv[r + 2]
        r = r + 2
      else
        r = r + 1
      end
    else
      local v
      if alg == 1 then
        local b = K[koff + g]
        k1, k2 = b .. p[7], b .. p[9]
        v = first('MGET', k1, k2)
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
      local cost, limit = p[3], p[11]
      local cur = v1 and tonumber(v1) or 0
      local prev = v2 and tonumber(v2) or 0
      if prev > limit then
        prev = limit
      end
      if cost < 0 then -- a refund: this window's count drops, not below 0
        local was = cur
        cur = cur + cost
        if cur < 0 then
          cur = 0
        end
        if cur == 0 and was > 0 then -- emptied: as if never written
          call('DEL', k1)
        elseif cur ~= was then
          call('INCRBY', k1, p[6])
        end
        out[n] = weigh(p[13], p[14], p[10], cur, prev)
      else
        local w, retry = sliding_decide(limit, p[12], p[13], p[14], cost, p[10], cur, prev)
        out[n] = w
        if retry then
          n = n + 1
          out[n] = retry
        elseif cost > 0 then
          call('INCRBY', k1, p[6])
          if not v1 then
            call('PEXPIREAT', k1, p[8])
          end
        end
      end
    else
      local now, cost, burst, num, den = p[2], p[3], p[6], p[7], p[8]
      local t, tc, ts = burst, 0, now
      if v1 then
        t, tc, ts = struct.unpack(STATE, v1)
      end
      local allowed
      allowed, t, ts, tc = bucket_decide(burst, num, den, cost, now, t, ts, tc)
      if allowed then
        out[n] = t * den + tc
      else
        out[n] = -(t * den + tc) - 2
      end
      if cost ~= 0 then -- a charge or a refund leaves its state
        if t >= burst then
          bucket_write(k1, v1, false)
        else
          bucket_write(k1, v1, t, tc, ts, bucket_expiry(burst, num, den, t, tc, ts))
        end
      end
    end
  end
  i = i + cnt
end
out[n + 1] = nil
return out
