--[[
fixed.lua: fixed-window charges of one window, one cost and one time,
decided exactly as take.lua decides them (the same keys, counts and
expiries) at the least cost a call can have: no parameter set, no map, and
no number parsed or formatted while the caller's window is Redis' (but a
one-op reply's count past the first charge).

KEYS[i]  key of op i: its base key (take.lua's) followed by S; ops of one
         key are decided in their order
ARGV[1]  tag     an integer below 2^53, echoed first in the reply
ARGV[2]  cost    every op's charge, milli-requests (1 <= cost <= 2^52)
ARGV[3]  S       the window's start, Unix seconds: at Redis TIME, the
                 caller's guess by its own clock; else now's window
ARGV[4]  E       the window's end, S + W / 1000 (W its length, ms, a
                 multiple of 1000), as many digits as S: a counter created
                 expires then (PEXPIREAT of E followed by 000, which costs
                 Redis less than EXPIREAT of E)
ARGV[5]  now     the decision time, Unix ms, when it is not Redis TIME;
                 absent: Redis TIME (one argument less for most calls)
Returns  for one op, the string 'tag secs usec count'; for more,
         {tag, secs, usec, count_1, ...}: secs and usec are Redis TIME as
         TIME gives them (0 and 0 with an explicit now), count_i the count
         after op i, saturating at 2^52 as take.lua's.

At Redis TIME, when TIME is not in [S, E) (the two clocks disagree, or
the window ended on the way), the script takes S off each key and appends
Redis' window start instead, with its end. Digit strings of one length
compare as their numbers do, so that the check parses nothing. A one-op
reply's count is the cost's own string when the op created its counter,
and formatted as an integer (%d, not Lua's %.14g) otherwise.
]]

local call = redis.call
local MAX = 4503599627370496 -- 2^52, take.lua's
local n, tag, cs, lo, hi = #KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local cost = 1000 -- one request's, without parsing
if cs ~= '1000' then
  cost = tonumber(cs)
end

local s, us, K = '0', '0', KEYS
if not ARGV[5] then
  local t = call('TIME')
  s, us = t[1], t[2]
  if s ~= lo and not (#s == #lo and #s == #hi and lo < s and s < hi) then
    local clock = tonumber(s) * 1000 + (us - us % 1000) / 1000
    local w = (hi - lo) * 1000
    local ws = clock - clock % w
    local start = string.format('%d', ws / 1000)
    hi = string.format('%d', (ws + w) / 1000)
    K = {}
    for i = 1, n do
      local k = KEYS[i]
      K[i] = string.sub(k, 1, #k - #lo) .. start
    end
  end
end

-- One op's reply is a string: a table reply costs Redis more than a
-- string built (docs/design.md, "The scripts").
local out, v, x -- x: the end in ms, made once a counter is
if n > 1 then
  out = {tag, s, us, unpack(K)} -- as long as the reply
end
for i = 1, n do
  local k = K[i]
  v = call('INCRBY', k, cs)
  if v == cost then
    if not x then
      x = hi .. '000'
    end
    call('PEXPIREAT', k, x)
  elseif v > MAX then
    v = MAX
    call('SET', k, '4503599627370496', 'KEEPTTL')
  end
  if out then
    out[i + 3] = v
  end
end
if out then
  return out
end
if v == cost then
  v = cs -- created: its count is the cost
else
  v = string.format('%d', v)
end
return tag .. ' ' .. s .. ' ' .. us .. ' ' .. v
