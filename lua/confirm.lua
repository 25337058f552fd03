-- confirm: mark pending reservations confirmed once the store holds their orders, so the sweeper
-- stops looking at them. The units stay taken. One order is a batch of one.
-- KEYS: 1 res, 2 pending (one campaign's: one hash slot)
-- ARGV: the order ids, each confirmed in turn exactly as if it were alone
-- Returns {confirmed, ...}: how many orders this call confirmed, then, for each order it did
-- not, its position in ARGV and {outcome, state} like release: "unchanged" with the current
-- state, "unknown" with "" when there is no such reservation, or "malformed" with the error for
-- a record it cannot parse (which stops nothing else). An order not listed was confirmed: "done"
-- with "confirmed". The consumer's batches are mostly pending orders: its replies stay short.
-- The batch reads and writes Redis in three calls, not three per order: each call from a script
-- costs Redis about what its work does (BenchmarkConfirmAll).
local records = redis.call('HMGET', KEYS[1], unpack(ARGV))
local made = {}          -- order id -> the record this call wrote for it (an id may repeat)
local sets, gone = {}, {} -- the HSET field-value pairs and the ZREM members
local out = {0}
for i, id in ipairs(ARGV) do
  local rec = made[id] or records[i]
  local outcome, state = 'done', 'confirmed'
  if not rec then
    outcome, state = 'unknown', ''
  else
    -- Parsed as release.lua parses it: a record it would refuse is not confirmed either.
    local _, _, current, rest = string.find(rec, '^(%a+)|(%d+|%d+|.*)$')
    if not current then
      outcome, state = 'malformed', 'malformed reservation ' .. id
    elseif current ~= 'pending' then
      outcome, state = 'unchanged', current
    else
      made[id] = 'confirmed|' .. rest
      sets[#sets + 1], sets[#sets + 2] = id, made[id]
      gone[#gone + 1] = id
    end
  end
  if outcome == 'done' then
    out[1] = out[1] + 1
  else
    out[#out + 1] = i
    out[#out + 1] = outcome
    out[#out + 1] = state
  end
end
if #sets > 0 then
  redis.call('HSET', KEYS[1], unpack(sets))
  redis.call('ZREM', KEYS[2], unpack(gone))
end
return out
