-- lock_renew: extend the lease, only for its holder.
-- KEYS: 1 lock; ARGV: 1 holder token, 2 lease in ms
-- Returns 1 when renewed, 0 when the lock is no longer this holder's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
