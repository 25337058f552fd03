-- restore_fill: write one chunk of a frozen campaign's rebuilt hash (records of confirmed
-- orders, buyers' holdings), only for the rebuild whose mark the frozen field holds
-- (restore_clear.lua says why).
-- KEYS: 1 meta, 2 the hash
-- ARGV: 1 the rebuild's mark (Freeze), then field, value pairs
-- Returns 1, or 0 when the campaign is not frozen by this rebuild (nothing written).
if redis.call('HGET', KEYS[1], 'frozen') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], unpack(ARGV, 2))
return 1
