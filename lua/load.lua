-- load: make a campaign sellable in Redis unless it is already there, in one atomic step: a
-- second loader (another api host rebuilding at the same time) finds the meta hash and touches
-- nothing, so it cannot overwrite what buyers took from the first copy.
-- KEYS: 1 stock, 2 meta, 3 buyers
-- ARGV: 1 remaining, 2 per-user limit, 3 starts (ms), 4 ends (ms, 0 = open-ended),
--       5.. pairs of user, units held already (a campaign rebuilt from the store)
-- Returns 1 when loaded, 0 when the campaign was there already.
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
-- Leftovers of a lost copy are not holdings; the store's are.
redis.call('DEL', KEYS[3])
for i = 5, #ARGV - 1, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'limit', ARGV[2], 'starts_ms', ARGV[3], 'ends_ms', ARGV[4])
return 1
