-- rehome: record in a campaign's meta the run id of the primary its keys live on now, after a
-- reshard moved them there whole (guard.go: resharded), so that the guard looks from then on
-- for a restart or a failover of that primary, and no longer of the one they left.
-- KEYS: 1 meta
-- ARGV: 1 the run id the meta records, 2 the run id of the primary that holds the keys now
-- Returns 1, or 0 when the meta records another run id (a rebuild restored the campaign
-- since), the campaign is frozen (a rebuild restores it and records its own), or it is gone:
-- then nothing is written.
local meta = redis.call('HMGET', KEYS[1], 'gen', 'frozen')
if meta[1] ~= ARGV[1] or meta[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'gen', ARGV[2])
return 1
