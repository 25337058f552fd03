-- drop: delete an ended campaign's keys once nothing in them is pending, unless an operator's
-- change newer than the one the caller found ended has reached them (an extend reopened the
-- sale meanwhile); the store keeps its history.
-- KEYS: 1 pending, 2 meta, then every key of the campaign
-- ARGV: 1 the store's version of the campaign the caller found ended
-- Returns 1 when it deleted, 0 while a reservation is still pending or Redis holds a newer
-- version.
if redis.call('ZCARD', KEYS[1]) > 0 then
  return 0
end
if tonumber(redis.call('HGET', KEYS[2], 'ver') or '0') > tonumber(ARGV[1]) then
  return 0
end
redis.call('DEL', unpack(KEYS, 3))
return 1
