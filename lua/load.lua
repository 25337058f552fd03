-- load: put a new campaign on sale unless it is already there. The meta hash is written last
-- and is what reserve checks, and a second loader finds it and touches nothing, so a load can
-- never reset what buyers took from the first one.
-- KEYS: 1 stock, 2 meta
-- ARGV: 1 remaining, 2 per-user limit, 3 starts (ms), 4 ends (ms, 0 = open-ended), 5 the run id
-- of the server (rebuild.go: the campaign's generation), 6 stock (total units), 7 the store's
-- version of the campaign (sync.lua)
-- Returns 1 when loaded, 0 when the campaign was there already.
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'limit', ARGV[2], 'starts_ms', ARGV[3], 'ends_ms', ARGV[4], 'gen', ARGV[5], 'stock', ARGV[6], 'ver', ARGV[7])
return 1
