--[[
demand.lua: FastLimit replicas share the demand of the Envoy streams they
serve in RLQS buckets (pkg/rlqs), so that each can divide a bucket's limit
among every stream, whichever replica serves it. One call publishes a
stream's demand in many buckets and reads back those the caller asks for.

KEYS[i]  one hash per bucket, "{prefix}:{<identifier>}:{tenant}:rlqs" (the
         project's key scheme, the window part "rlqs"). Field: the client,
         "<replica>/<stream>". Value: "<expires>:<rate>", expires in Unix
         ms, rate in milli-requests per second (-1: not known yet).
ARGV[1]  now     Unix ms; 0 means Redis TIME (read once)
ARGV[2]  ttl     ms a published value lives; also the key's PEXPIRE, set
                 when a write adds a field and renewed by each read (every
                 replica serving the bucket reads it every report period
                 or so), so that a bucket no one reads or adds to
                 disappears ttl after the last
ARGV[3 + 3(i-1) ...] per key i: op, field, rate
         op      bit 1 write the field (HSET), bit 2 delete it
                 (HDEL), bit 4 read the key's live fields back, bit 8
                 delete the field only if its value has expired at now
                 (the deletes of expired values a read met: a value
                 written again since is kept)
         field   the client's field (ignored unless bits 1, 2 or 8)
         rate    milli-requests per second, an integer (ignored unless 1)
Returns  {now, r_1, ..., r_n}: now in Unix ms; r_i is 0 unless op i has
         bit 4, then the key's HGETALL, {field, value, ...}, expired values
         included: the caller drops them, and deletes them with a later
         call, by bit 8 (parsing them here would cost Redis more than the
         read).

Writes are idempotent: a call sent again writes the same values.
]]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ttl = tonumber(ARGV[2])
local value_prefix = tostring(now + ttl) .. ':'
local out = {now}
for i = 1, #KEYS do
  local key = KEYS[i]
  local a = 3 * i
  local op = tonumber(ARGV[a])
  if op % 2 == 1 then
    if redis.call('HSET', key, ARGV[a + 1], value_prefix .. ARGV[a + 2]) == 1 then
      redis.call('PEXPIRE', key, ttl)
    end
  elseif op % 4 >= 2 then
    redis.call('HDEL', key, ARGV[a + 1])
  elseif op >= 8 then
    local v = redis.call('HGET', key, ARGV[a + 1])
    local colon = v and string.find(v, ':', 1, true)
    local expires = colon and tonumber(string.sub(v, 1, colon - 1))
    if expires and expires < now then
      redis.call('HDEL', key, ARGV[a + 1])
    end
  end
  if op % 8 >= 4 then
    redis.call('PEXPIRE', key, ttl)
    out[#out + 1] = redis.call('HGETALL', key)
  else
    out[#out + 1] = 0
  end
end
return out
