-- trim: drop the records of reservations that ended (released, refunded, expired) longer ago
-- than the retention, by Redis's clock, at most ARGV[2] of them. A record is kept that long so
-- that a retry of the same Idempotency-Key finds its order cancelled instead of reserving anew
-- (a rebuild writes it back after a loss); after it, the store holds the history. Confirmed
-- records stay while the campaign lives: a refund gives units back through them.
-- KEYS: 1 res, 2 done
-- ARGV: 1 retention (ms), 2 most records to drop
-- Returns how many records it dropped.
local t = redis.call('TIME')
local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[2]))
if #ids > 0 then
  redis.call('HDEL', KEYS[1], unpack(ids))
  redis.call('ZREM', KEYS[2], unpack(ids))
end
return #ids
