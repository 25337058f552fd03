package store

// UsePortableSQL makes s send ConfirmOrders' batches as SQLite's statements, with one parameter
// per value, on PostgreSQL too: the benchmark's "before".
func UsePortableSQL(s *Store) { s.portableSQL = true }
