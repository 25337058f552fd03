package store

// UseReads makes s confirm every batch with the reads of its known orders and buyers' totals, as
// on SQLite, never the optimistic way: what TestConfirmOrdersOptimistic compares against.
func UseReads(s *Store) { s.readsOnly = true }
