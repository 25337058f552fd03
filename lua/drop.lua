-- drop: delete an ended campaign's keys once nothing in them is pending; the store keeps its
-- history.
-- KEYS: 1 pending, then every key of the campaign
-- Returns 1 when it deleted, 0 while a reservation is still pending.
if redis.call('ZCARD', KEYS[1]) > 0 then
  return 0
end
redis.call('DEL', unpack(KEYS, 2))
return 1
