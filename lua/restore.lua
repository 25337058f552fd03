-- restore: put a frozen campaign back on sale with the remaining stock and limits rebuilt from
-- the store. The buyers and reservation records were written beforehand (restore_clear.lua,
-- restore_fill.lua, restore_ended.lua), while the campaign was frozen and so could not be sold
-- from.
-- KEYS: 1 stock, 2 meta
-- ARGV: 1 remaining, 2 per-user limit, 3 starts (ms), 4 ends (ms, 0 = open-ended), 5 the run id
-- of the server (rebuild.go: the campaign's generation), 6 stock (total units), 7 the store's
-- version of the campaign (sync.lua), 8 the rebuild's mark (Freeze)
-- Returns 1, or 0 when the campaign is not frozen by this rebuild: another rebuild froze it
-- since (and writes its own figures) or restored it already.
if redis.call('HGET', KEYS[2], 'frozen') ~= ARGV[8] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'limit', ARGV[2], 'starts_ms', ARGV[3], 'ends_ms', ARGV[4], 'gen', ARGV[5], 'stock', ARGV[6], 'ver', ARGV[7])
redis.call('HDEL', KEYS[2], 'frozen')
return 1
