-- expired: list up to ARGV[1] pending reservations whose deadline has passed, by Redis's clock
-- (the api hosts' clocks may disagree; the deadline was written with this one), oldest first,
-- past the first ARGV[2] of them.
-- KEYS: 1 pending
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', tonumber(ARGV[2]), tonumber(ARGV[1]))
