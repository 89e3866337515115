--[[
demand.lua: FastLimit replicas share the demand of the Envoy streams they
serve in RLQS buckets (pkg/rlqs), and a ledger of the rates those Envoys
may hold, so that each replica divides a bucket's limit among every stream
whichever replica serves it, and no replica hands out a rate another one
still has out. One call publishes a stream's demand in many buckets,
reserves raises, and reads back the buckets the caller asks for.

KEYS[i]  one hash per bucket, "{prefix}:{<identifier>}:{tenant}:rlqs" (the
         project's key scheme, the window part "rlqs"). Field: the client,
         "<replica>/<stream>". Value: "<expires>:<rate>:<held>", expires in
         Unix ms, rate in milli-requests per second (-1: not known yet;
         -2: the client left, its held rate still counted), held the rate
         its Envoy may hold, milli-requests per second. A value without
         held (an older replica's) holds 0.
ARGV[1]  now     Unix ms; 0 means Redis TIME (read once)
ARGV[2]  ttl     ms a published value lives; also the key's PEXPIRE, set
                 when a write adds a field and renewed by each read (every
                 replica serving the bucket reads it every report period
                 or so), so that a bucket no one reads or adds to
                 disappears ttl after the last
ARGV[3 + 7(i-1) ...] per key i: op, field, rate, held, cap, adopt, fresh
         op      bit 1 write the field with rate, its held the larger of
                 held and the live value's; bit 2 delete the field (HDEL);
                 bit 4 read the key's live fields back; bit 8 delete the
                 field only if its value has expired at now (the deletes
                 of expired values a read met: a value written again since
                 is kept); bit 16 reserve: write the field with rate and
                 held granted as below
         field   the client's field (ignored unless bits 1, 2, 8 or 16)
         rate    milli-requests per second, an integer (bits 1 and 16)
         held    milli-requests per second, an integer (bits 1 and 16)
         cap     bit 16: the most the key's live fields may hold together;
                 a held no larger than the field's live one is granted,
                 a larger one only up to cap less the other live fields'
                 (never below the field's own)
         adopt   bit 16: milli-requests per second the field takes over
                 from values that can be adopted (its Envoy's old stream's
                 may be one, which that Envoy holds until it is answered),
                 those that left first, then those whose rate is nearest
                 the field's: each such value's held is lowered by what it
                 gives, and its rate set to -2 (its Envoy is taken to be
                 the field's)
         fresh   bit 16, ms: a value that left (rate -2), or that expires
                 within ttl - fresh (written fresh ago or earlier, at this
                 ttl: its replica no longer writes it), can be adopted
Returns  {now, r_1, ..., r_n}: now in Unix ms; r_i is {granted, adopted}
         (milli-requests per second) if op i has bit 16; the key's HGETALL,
         {field, value, ...}, if it has bit 4, expired values included (the
         caller drops them, and deletes them with a later call, by bit 8:
         parsing them here would cost Redis more than the read); else 0.

Writes are idempotent: a call sent again writes the same values. A
reserve that adopts is not, and is sent again only when the script was not
loaded (NOSCRIPT), when nothing of the call ran.
]]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ttl = tonumber(ARGV[2])
local value_prefix = tostring(now + ttl) .. ':'

-- parse returns a value's expiry, held (0 when absent) and rate, or nil.
local function parse(v)
  if not v then
    return nil
  end
  local a = string.find(v, ':', 1, true)
  if not a then
    return nil
  end
  local expires = tonumber(string.sub(v, 1, a - 1))
  local b = string.find(v, ':', a + 1, true)
  local held = b and tonumber(string.sub(v, b + 1)) or 0
  local rate = string.sub(v, a + 1, (b or 0) - 1)
  return expires, held, rate
end

-- live_held is the held rate of the field's value if it has not expired.
local function live_held(key, field)
  local expires, held = parse(redis.call('HGET', key, field))
  if expires and expires >= now then
    return held
  end
  return 0
end

local function write(key, field, rate, held)
  if redis.call('HSET', key, field, value_prefix .. rate .. ':' .. held) == 1 then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- reserve grants field a held of want, as the header says.
local function reserve(key, field, rate, want, cap, adopt, fresh)
  local stale_before = now + ttl - fresh
  local own = live_held(key, field)
  if want <= own and adopt <= 0 then
    return want, 0
  end
  local others = 0
  local adoptable = {}
  local all = redis.call('HGETALL', key)
  for j = 1, #all, 2 do
    if all[j] ~= field then
      local expires, held, v_rate = parse(all[j + 1])
      if expires and expires >= now then
        others = others + held
        local r = tonumber(v_rate)
        if held > 0 and (r == -2 or expires <= stale_before) then
          local far = 0 -- a value that left is taken first
          if r ~= -2 then
            far = 1 + math.abs(r - rate)
          end
          adoptable[#adoptable + 1] = {all[j], all[j + 1], held, far}
        end
      end
    end
  end
  table.sort(adoptable, function(x, y) return x[4] < y[4] end)
  local adopted = 0
  for _, v in ipairs(adoptable) do
    if adopted >= adopt then
      break
    end
    local take = math.min(v[3], adopt - adopted)
    local colon = string.find(v[2], ':', 1, true)
    redis.call('HSET', key, v[1], string.sub(v[2], 1, colon) .. '-2:' .. (v[3] - take))
    others, adopted = others - take, adopted + take
  end
  if want <= own then
    return want, adopted
  end
  return math.max(own, math.min(want, cap - others)), adopted
end

local out = {now}
for i = 1, #KEYS do
  local key = KEYS[i]
  local a = 3 + 7 * (i - 1)
  local op = tonumber(ARGV[a])
  local field = ARGV[a + 1]
  local result = 0
  if op >= 16 then
    local granted, adopted = reserve(key, field, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
      tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]))
    write(key, field, ARGV[a + 2], granted)
    result = {granted, adopted}
  elseif op % 2 == 1 then
    write(key, field, ARGV[a + 2], math.max(tonumber(ARGV[a + 3]), live_held(key, field)))
  elseif op % 4 >= 2 then
    redis.call('HDEL', key, field)
  elseif op % 16 >= 8 then
    local expires = parse(redis.call('HGET', key, field))
    if expires and expires < now then
      redis.call('HDEL', key, field)
    end
  end
  if op < 16 and op % 8 >= 4 then
    redis.call('PEXPIRE', key, ttl)
    result = redis.call('HGETALL', key)
  end
  out[#out + 1] = result
end
return out
