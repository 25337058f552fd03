// Package store is the order database shared by the three roles: campaigns, final order rows and
// per-buyer totals, on PostgreSQL in production and on SQLite (pure Go, modernc.org/sqlite) in
// `seckill dev`. One sqlx code path serves both; the conformance suite runs on both.
//
// The store is the final arbiter. An order row is inserted once, with its final state, by whoever
// gets there first: the consumer (confirmed) or the compensator (failed). The loser's insert
// conflicts on the primary key and it does nothing. The conditional updates sold + q <= stock and
// bought + q <= per_user_limit make an oversell impossible even if Redis lost its state.
package store
