-- expired: list up to ARGV[1] pending reservations whose deadline has passed, by Redis's clock
-- (the api hosts' clocks may disagree; the deadline was written with this one).
-- KEYS: 1 pending
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
