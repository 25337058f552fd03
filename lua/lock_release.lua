-- lock_release: compare and delete, so a holder whose lease ran out cannot free its successor's.
-- KEYS: 1 lock; ARGV: 1 holder token
-- Returns 1 when released, 0 when the lock was not this holder's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
