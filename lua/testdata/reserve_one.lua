-- The reserve script as it was before it took many purchases per call: one purchase, one call.
-- Kept as the oracle of TestReserveBatchMatchesOneByOne; nothing in the product runs it.
-- reserve: take quantity units of one campaign for one buyer, atomically.
-- KEYS: 1 stock, 2 buyers, 3 res, 4 pending, 5 meta (all under one hash tag: one slot)
-- ARGV: 1 order id, 2 user id, 3 quantity, 4 reservation ttl in ms
-- Returns {status, remaining, deadline_ms}; status is "ok", "duplicate" (this order id was
-- reserved before: nothing changes, and a fourth element holds the first reservation's record),
-- "frozen", or an error code for the caller to map.
local meta = redis.call('HMGET', KEYS[5], 'limit', 'starts_ms', 'ends_ms', 'frozen')
-- A frozen campaign is being rebuilt from the store after Redis lost data: sell nothing.
if meta[4] then
  return {'frozen', 0, 0}
end
if not meta[1] then
  return {'campaign_not_found', 0, 0}
end
local limit = tonumber(meta[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local qty = tonumber(ARGV[3])

local prior = redis.call('HGET', KEYS[3], ARGV[1])
if prior then
  local _, _, deadline = string.find(prior, '^%a+|%d+|(%d+)|')
  if not deadline then
    return redis.error_reply('malformed reservation ' .. ARGV[1])
  end
  return {'duplicate', tonumber(redis.call('GET', KEYS[1]) or '0'), tonumber(deadline), prior}
end
if now < tonumber(meta[2]) then
  return {'not_started', 0, 0}
end
if tonumber(meta[3]) > 0 and now >= tonumber(meta[3]) then
  return {'ended', 0, 0}
end
-- A quantity below one would give units back and leave a record release cannot parse.
if not qty or qty < 1 or qty ~= math.floor(qty) or qty > limit then
  return {'invalid_request', 0, 0}
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
if stock < qty then
  return {'sold_out', stock, 0}
end
local bought = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
if bought + qty > limit then
  return {'limit_exceeded', stock, 0}
end

local deadline = now + tonumber(ARGV[4])
redis.call('DECRBY', KEYS[1], qty)
redis.call('HINCRBY', KEYS[2], ARGV[2], qty)
-- state|quantity|deadline|user: the user goes last because it is the only free-form part.
redis.call('HSET', KEYS[3], ARGV[1], 'pending|' .. qty .. '|' .. deadline .. '|' .. ARGV[2])
redis.call('ZADD', KEYS[4], deadline, ARGV[1])
return {'ok', stock - qty, deadline}
