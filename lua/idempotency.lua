-- idempotency: the record of one Idempotency-Key of one buyer (run by api/idempotency.go). It lives
-- under its campaign's hash tag, so it runs in the slot of the campaign's other keys.
-- KEYS: 1 the record, a hash: fp (the request's fingerprint), lease_ms and owner (while a
--       request runs: until when, and which), then status, ctype and body (its answer, once it
--       has one); 2 (begin, peek) the campaign's reservation records (lua.Keys.Res)
-- ARGV: 1 op, 2 fingerprint, then
--   begin, peek: 3 lease in ms, 4 time to live of the record in ms, 5 the key's order id,
--                6 the request's owner id
--   finish: 3 status, 4 content type, 5 body, 6 owner id
--   abort: 3 owner id
-- Only the request that holds the lease (its owner id) may finish or abort: one that outlived
-- its lease, which a retry took over, must not overwrite the retry's answer or drop its record.
-- Returns {outcome, ...}:
--   begin: "new" (the record is created and leased to the caller), "retry" (the first request
--          stopped without an answer; its lease ran out and is now the caller's), "done" with
--          status, content type and body, "busy" with the ms left on the lease, or "mismatch"
--          (the key was used with another request)
--   peek:  as begin, but "absent" and "stale" where begin would say "new" and "retry", and it
--          writes nothing; except that with no record but a reservation of the key's order (the
--          record was forgotten while the order's outcome was not known), it begins: the
--          purchase goes on and the reserve script tells what became of that order
--   finish, abort: "ok", or "lost" (the lease passed to a retry; nothing written)
local op = ARGV[1]
local rec = redis.call('HMGET', KEYS[1], 'fp', 'lease_ms', 'status', 'ctype', 'body', 'owner')
if op == 'finish' then
  if rec[1] ~= ARGV[2] or rec[6] ~= ARGV[6] then
    return {'lost'}
  end
  redis.call('HSET', KEYS[1], 'status', ARGV[3], 'ctype', ARGV[4], 'body', ARGV[5])
  redis.call('HDEL', KEYS[1], 'lease_ms', 'owner')
  return {'ok'}
end
if op == 'abort' then
  if rec[1] ~= ARGV[2] or rec[6] ~= ARGV[3] then
    return {'lost'}
  end
  if not rec[3] then
    redis.call('DEL', KEYS[1])
  end
  return {'ok'}
end
if op ~= 'begin' and op ~= 'peek' then
  return redis.error_reply('idempotency: unknown op ' .. tostring(op))
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not rec[1] then
  if op == 'peek' and redis.call('HEXISTS', KEYS[2], ARGV[5]) == 0 then
    return {'absent'}
  end
  redis.call('HSET', KEYS[1], 'fp', ARGV[2], 'lease_ms', now + tonumber(ARGV[3]), 'owner', ARGV[6])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {'new'}
end
if rec[1] ~= ARGV[2] then
  return {'mismatch'}
end
if rec[3] then
  return {'done', rec[3], rec[4], rec[5]}
end
local left = tonumber(rec[2] or '0') - now
if left > 0 then
  return {'busy', left}
end
if op == 'peek' then
  return {'stale'}
end
redis.call('HSET', KEYS[1], 'lease_ms', now + tonumber(ARGV[3]), 'owner', ARGV[6])
return {'retry'}
