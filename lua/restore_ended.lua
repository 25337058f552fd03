-- restore_ended: write one chunk of a frozen campaign's ended reservations (released, refunded,
-- expired) as release.lua leaves them: the record, and the order in the done set by when it
-- ended, so that trim.lua drops it once the retention has passed. Only for the rebuild whose
-- mark the frozen field holds (restore_clear.lua says why).
-- KEYS: 1 meta, 2 res, 3 done
-- ARGV: 1 the rebuild's mark (Freeze), then order id, record, ended (ms) triples
-- Returns 1, or 0 when the campaign is not frozen by this rebuild (nothing written).
if redis.call('HGET', KEYS[1], 'frozen') ~= ARGV[1] then
  return 0
end
local records, done = {}, {}
for i = 2, #ARGV, 3 do
  records[#records + 1], records[#records + 2] = ARGV[i], ARGV[i + 1]
  done[#done + 1], done[#done + 2] = ARGV[i + 2], ARGV[i]
end
redis.call('HSET', KEYS[2], unpack(records))
redis.call('ZADD', KEYS[3], unpack(done))
return 1
