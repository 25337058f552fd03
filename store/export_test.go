package store

// UsePortableSQL makes s send ConfirmOrders' batches as SQLite's statements, with one parameter
// per value, on PostgreSQL too: the benchmark's "before".
func UsePortableSQL(s *Store) { s.portableSQL = true }

// OptimisticRetries returns how many batches ConfirmOrders has done again with the reads after
// the optimistic way found it was wrong.
func OptimisticRetries() int64 { return optimisticRetries.Load() }

// OptimisticDone returns how many batches ConfirmOrders did the optimistic way.
func OptimisticDone() int64 { return optimisticDone.Load() }

// UseReads makes s read every batch's known orders and buyers' totals before deciding, as
// ConfirmOrders does when its optimistic way finds it was wrong.
func UseReads(s *Store) { s.noOptimistic = true }
