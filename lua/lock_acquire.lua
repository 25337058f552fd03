-- lock_acquire: take a lease lock if it is free, in one step: SET NX PX makes acquisition and
-- expiry one command. No fencing counter here: Redis may lose it, so the store issues the
-- tokens (store.IssueFence).
-- KEYS: 1 lock
-- ARGV: 1 holder token, 2 lease in ms
-- Returns 1 when taken, or 0 when another holder has the lock.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
