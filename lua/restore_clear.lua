-- restore_clear: the first step of a restore (rebuild.go): delete what Redis holds of a frozen
-- campaign's sale, which the store's figures then replace. Only the rebuild whose mark the
-- frozen field holds may: a rebuild whose lease ran out while it worked finds its successor's
-- mark there, or none once the campaign is back on sale, and must leave the sale alone.
-- KEYS: 1 meta, then the keys to delete (stock, buyers, res, pending, done)
-- ARGV: 1 the rebuild's mark (Freeze)
-- Returns 1, or 0 when the campaign is not frozen by this rebuild (nothing deleted).
if redis.call('HGET', KEYS[1], 'frozen') ~= ARGV[1] then
  return 0
end
redis.call('DEL', unpack(KEYS, 2))
return 1
