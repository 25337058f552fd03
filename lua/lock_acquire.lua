-- lock_acquire: take a lease lock if it is free, in one step: SET NX PX makes acquisition and
-- expiry one command, and the fencing counter grows with every acquisition.
-- KEYS: 1 lock, 2 fencing counter (same hash tag)
-- ARGV: 1 holder token, 2 lease in ms
-- Returns the fencing token, or 0 when another holder has the lock.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
