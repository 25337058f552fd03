-- confirm: mark a pending reservation confirmed once the store holds its order, so the sweeper
-- stops looking at it. The units stay taken.
-- KEYS: 1 res, 2 pending
-- ARGV: 1 order id
-- Returns {outcome, state} like release.
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then
  return {'unknown', ''}
end
local _, _, state, rest = string.find(rec, '^(%a+)|(%d+|%d+|.*)$')
if not state then
  return redis.error_reply('malformed reservation ' .. ARGV[1])
end
if state ~= 'pending' then
  return {'unchanged', state}
end
redis.call('HSET', KEYS[1], ARGV[1], 'confirmed|' .. rest)
redis.call('ZREM', KEYS[2], ARGV[1])
return {'done', 'confirmed'}
