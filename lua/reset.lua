--[[
reset.lua: forgets limits' state, for operators (pkg/store Redis.Reset).

KEYS[i]  base key of op i (ending in ':'); on a Redis Cluster all KEYS of a
         call share one slot (a descriptor's keys share its hash tag)
ARGV[i]  window of op i, ms (a positive multiple of 1000); or, for a
         calendar's windows, the starts of three periods around the
         caller's guess of now's, Unix seconds, separated by spaces (take.lua's
         B1, B2, B3), which hold Redis' current and previous periods
Deletes, at Redis TIME, each op's window counters that take.lua's fixed and
sliding windows read, KEYS[i] .. S for S the current and the previous
window start in Unix seconds (a calendar's: those three), and its token
bucket, KEYS[i] .. 'tokens', whatever the op's algorithm.
Returns  the number of keys deleted.
]]

local t = redis.call('TIME')
local us = tonumber(t[2])
local now = tonumber(t[1]) * 1000 + (us - us % 1000) / 1000
local n = 0
for i, base in ipairs(KEYS) do
  local a = ARGV[i]
  if string.find(a, ' ', 1, true) then
    local keys = {base .. 'tokens'}
    for s in string.gmatch(a, '%d+') do
      keys[#keys + 1] = base .. s
    end
    n = n + redis.call('DEL', unpack(keys))
  else
    local w = tonumber(a)
    local ws = now - now % w
    n = n + redis.call('DEL', base .. string.format('%d', ws / 1000),
      base .. string.format('%d', (ws - w) / 1000), base .. 'tokens')
  end
end
return n
