-- sync: apply an operator's change to a campaign on sale (its stock grew, its end moved) once,
-- and never an older change after a newer one: the store numbers a campaign's changes (its
-- version), and the api and the sweeper both send the store's latest, in any order.
-- KEYS: 1 stock, 2 meta
-- ARGV: 1 version, 2 stock (total units), 3 ends (ms, 0 = open-ended)
-- Returns 1 when applied, 0 when Redis has this version or a newer one, -1 when the campaign is
-- not in Redis, -2 when it is frozen (its rebuild writes the store's figures).
local meta = redis.call('HMGET', KEYS[2], 'limit', 'frozen', 'ver', 'stock')
if not meta[1] then
  return -1
end
if meta[2] then
  return -2
end
if tonumber(meta[3] or '0') >= tonumber(ARGV[1]) then
  return 0
end
-- Added units go on sale: what buyers took stays taken.
local add = tonumber(ARGV[2]) - tonumber(meta[4] or ARGV[2])
if add < 0 then
  return redis.error_reply('sync: a campaign\'s stock may only grow')
end
if add > 0 then
  redis.call('INCRBY', KEYS[1], add)
end
redis.call('HSET', KEYS[2], 'ver', ARGV[1], 'stock', ARGV[2], 'ends_ms', ARGV[3])
return 1
