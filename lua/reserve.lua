-- reserve: take units of one campaign for buyers, atomically. A call carries one purchase or
-- many (the coalescer's batch); each gets exactly the answer and the effect it would have had
-- in a call of its own, in the order given. Redis pays once per call for the script, the
-- campaign's settings, the clock and the writes, which is why the coalescer batches.
-- KEYS: 1 stock, 2 buyers, 3 res, 4 pending, 5 meta (all under one hash tag: one slot)
-- ARGV: 1 reservation ttl in ms, then order id, user id, quantity for each purchase
-- Returns four values per purchase, flat: status, remaining, deadline_ms, record. status is "ok",
-- "duplicate" (this order id was reserved before: nothing changes, and record is the first
-- reservation's), "frozen", "malformed" (record is what Redis holds and cannot parse), or an
-- error code for the caller to map; record is "" unless said.
local n = (#ARGV - 1) / 3
if n < 1 or n ~= math.floor(n) then
  return redis.error_reply('reserve: want a ttl and order id, user id, quantity triples')
end
local out = {}
local function reply(status, remaining, deadline, record)
  local i = #out
  out[i + 1], out[i + 2], out[i + 3], out[i + 4] = status, remaining, deadline, record or ''
end

local meta = redis.call('HMGET', KEYS[5], 'limit', 'starts_ms', 'ends_ms', 'frozen')
-- A frozen campaign is being rebuilt from the store after Redis lost data: sell nothing.
local whole = (meta[4] and 'frozen') or (not meta[1] and 'campaign_not_found')
if whole then
  for _ = 1, n do reply(whole, 0, 0) end
  return out
end
local limit = tonumber(meta[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[1])
local starts, ends = tonumber(meta[2]), tonumber(meta[3])
-- An end at or before the start is a sale closed before it opened: over, not yet to come.
local over = ends > 0 and (now >= ends or ends <= starts)
local open = now >= starts and not over

local ids, users = {}, {}
for i = 1, n do
  ids[i], users[i] = ARGV[3 * i - 1], ARGV[3 * i]
end
-- Everything the purchases read, in two calls; what this call changes is kept here until the end.
local priors = redis.call('HMGET', KEYS[3], unpack(ids))
local held = redis.call('HMGET', KEYS[2], unpack(users))
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
local before = stock
local made = {}   -- order id -> the record this call wrote for it
local holds = {}  -- user -> units held after this call's purchases so far
local records, pending, buyers = {}, {}, {}

for i = 1, n do
  local id, user, qty = ids[i], users[i], tonumber(ARGV[3 * i + 1])
  local prior = made[id] or priors[i]
  local bought = holds[user] or tonumber(held[i] or '0')
  if prior then
    local _, _, first = string.find(prior, '^%a+|%d+|(%d+)|')
    if first then
      reply('duplicate', stock, tonumber(first), prior)
    else
      reply('malformed', 0, 0, prior)
    end
  elseif not open then
    reply(over and 'ended' or 'not_started', 0, 0)
  -- A quantity below one would give units back and leave a record release cannot parse.
  elseif not qty or qty < 1 or qty ~= math.floor(qty) or qty > limit then
    reply('invalid_request', 0, 0)
  elseif stock < qty then
    reply('sold_out', stock, 0)
  elseif not bought then
    reply('malformed', 0, 0, held[i])
  elseif bought + qty > limit then
    reply('limit_exceeded', stock, 0)
  else
    stock = stock - qty
    if not holds[user] then buyers[#buyers + 1] = user end
    holds[user] = bought + qty
    -- state|quantity|deadline|user: the user goes last because it is the only free-form part.
    local record = 'pending|' .. qty .. '|' .. deadline .. '|' .. user
    made[id] = record
    records[#records + 1], records[#records + 2] = id, record
    pending[#pending + 1], pending[#pending + 2] = deadline, id
    reply('ok', stock, deadline)
  end
end

if #records > 0 then
  local sums = {}
  for _, user in ipairs(buyers) do
    sums[#sums + 1], sums[#sums + 2] = user, holds[user]
  end
  redis.call('DECRBY', KEYS[1], before - stock)
  redis.call('HSET', KEYS[2], unpack(sums))
  redis.call('HSET', KEYS[3], unpack(records))
  redis.call('ZADD', KEYS[4], unpack(pending))
end
return out
