-- confirm: mark pending reservations confirmed once the store holds their orders, so the sweeper
-- stops looking at them. The units stay taken. One order is a batch of one.
-- KEYS: 1 res, 2 pending (one campaign's: one hash slot)
-- ARGV: the order ids, each confirmed in turn exactly as if it were alone
-- Returns {confirmed, ...}: how many orders this call confirmed, then, for each order it did
-- not, its position in ARGV and {outcome, state} like release: "unchanged" with the current
-- state, "unknown" with "" when there is no such reservation, or "malformed" with the error for
-- a record it cannot parse (which stops nothing else). An order not listed was confirmed: "done"
-- with "confirmed". The consumer's batches are mostly pending orders: its replies stay short.
local function confirm(id)
  local rec = redis.call('HGET', KEYS[1], id)
  if not rec then
    return 'unknown', ''
  end
  local _, _, state, rest = string.find(rec, '^(%a+)|(.*)$')
  if not state then
    return 'malformed', 'malformed reservation ' .. id
  end
  if state ~= 'pending' then
    return 'unchanged', state
  end
  redis.call('HSET', KEYS[1], id, 'confirmed|' .. rest)
  redis.call('ZREM', KEYS[2], id)
  return 'done', 'confirmed'
end

local out = {0}
for i, id in ipairs(ARGV) do
  local outcome, state = confirm(id)
  if outcome == 'done' then
    out[1] = out[1] + 1
  else
    out[#out + 1] = i
    out[#out + 1] = outcome
    out[#out + 1] = state
  end
end
return out
