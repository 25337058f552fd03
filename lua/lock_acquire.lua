-- lock_acquire: take a lease lock if it is free, in one step: SET NX PX makes acquisition and
-- expiry one command, and counts the acquisition. The count is the floor of the fencing token
-- the store issues (store.IssueFence), not the token: Redis may lose it, and the store may not.
-- It keeps the tokens above those of a compensator from before the store issued them, which
-- took the count itself as its token (a rolling upgrade runs both).
-- KEYS: 1 lock, 2 its count of acquisitions
-- ARGV: 1 holder token, 2 lease in ms
-- Returns the count when taken, or 0 when another holder has the lock.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
-- The same holder again: the client sent this call once more because its reply was lost (go-redis
-- does after a read timeout), and the first run took the lock. No one has counted since.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local n = redis.call('GET', KEYS[2])
  if not n then
    return redis.call('INCR', KEYS[2])
  end
  return tonumber(n)
end
return 0
