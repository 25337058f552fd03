package store

import "context"

// UseReads makes s confirm every batch with the reads of its known orders and buyers' totals, as
// on SQLite, never the optimistic way: what TestConfirmOrdersOptimistic compares against.
func UseReads(s *Store) { s.readsOnly = true }

// MigrateTo migrates s up to version last only, as an earlier release left its database.
func MigrateTo(ctx context.Context, s *Store, last int, opts ...MigrateOption) error {
	return s.migrateTo(ctx, last, opts...)
}

// Migrations is how many migrations this build has.
func Migrations() int { return len(migrations) }
