-- confirm: mark pending reservations confirmed once the store holds their orders, so the sweeper
-- stops looking at them. The units stay taken. One order is a batch of one.
-- KEYS: 1 res, 2 pending (one campaign's: one hash slot)
-- ARGV: the order ids, each confirmed in turn exactly as if it were alone
-- Returns, per order, flattened, {outcome, state} like release: "done" with "confirmed",
-- "unchanged" with the current state, "unknown" with "" when there is no such reservation, or
-- "malformed" with the error for a record it cannot parse (which stops nothing else).
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

local out = {}
for i, id in ipairs(ARGV) do
  out[2 * i - 1], out[2 * i] = confirm(id)
end
return out
