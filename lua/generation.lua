-- generation: what the guard compares for a campaign (rebuild.go: Generations), read in one
-- step on the server that holds its meta, wherever a reshard or a failover put it: the meta's
-- limit (present when the campaign is), the run id it records, its frozen mark, and the run id
-- of the server this runs on.
-- KEYS: 1 meta
-- Returns {limit, recorded run id, frozen mark, run id}, each nil where there is none; the run
-- id nil too when INFO is refused (a user without it) or knows no server section (miniredis).
local meta = redis.call('HMGET', KEYS[1], 'limit', 'gen', 'frozen')
local info = redis.pcall('INFO', 'server')
local id = false
if type(info) == 'string' then
  id = string.match(info, 'run_id:(%w+)') or ''
end
return {meta[1], meta[2], meta[3], id}
