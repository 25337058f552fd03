-- now: the clock of the server that holds a campaign, the one its deadlines and its sale's end
-- are compared with (reserve.lua, expired.lua). On a Cluster each primary has its own clock,
-- and a TIME without a key goes to any of them; the key sends this to the campaign's.
-- KEYS: 1 the campaign's meta (any of its keys would do: they share one slot)
-- Returns the time in Unix milliseconds, as reserve.lua reads it.
local t = redis.call('TIME')
return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
