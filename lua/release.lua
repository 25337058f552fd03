-- release: move one reservation from state ARGV[2] to ARGV[3] and give its units back, exactly
-- once: pending -> released, confirmed -> refunded, or confirmed -> expired (unpaid). Any other state is left alone, so running
-- the script twice restores once.
-- The record stays, now final, for the retention (see trim.lua): the done set has it by the time
-- it ended.
-- KEYS: 1 stock, 2 buyers, 3 res, 4 pending, 5 done
-- ARGV: 1 order id, 2 from state, 3 to state
-- Returns {outcome, state}: outcome "done" with the new state, "unchanged" with the current
-- state, or "unknown" when there is no such reservation; an error for a record it cannot parse.
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then
  return {'unknown', ''}
end
local _, _, state, qty, deadline, user = string.find(rec, '^(%a+)|(%d+)|(%d+)|(.*)$')
if not state then
  return redis.error_reply('malformed reservation ' .. ARGV[1])
end
if state ~= ARGV[2] then
  return {'unchanged', state}
end
-- A script is not rolled back: a count the writes below cannot add to must stop it before the
-- first, or each retry of the reservation, still in its state, gives its units back again.
local stock, held = redis.call('GET', KEYS[1]), redis.call('HGET', KEYS[2], user)
if (stock and not string.find(stock, '^-?%d+$')) or (held and not string.find(held, '^-?%d+$')) then
  return redis.error_reply('malformed reservation ' .. ARGV[1] .. ': its campaign\'s stock or its buyer\'s count is not a whole number')
end
redis.call('INCRBY', KEYS[1], qty)
if redis.call('HINCRBY', KEYS[2], user, -tonumber(qty)) <= 0 then
  redis.call('HDEL', KEYS[2], user)
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3] .. '|' .. qty .. '|' .. deadline .. '|' .. user)
redis.call('ZREM', KEYS[4], ARGV[1])
local t = redis.call('TIME')
redis.call('ZADD', KEYS[5], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[1])
return {'done', ARGV[3]}
