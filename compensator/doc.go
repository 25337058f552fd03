// Package compensator resolves every reservation that will not become an order: events the
// consumer dead-lettered, reservations past their deadline whose event never reached the store
// (the sweeper), and what an operator asks for (release a stuck order, refund a confirmed one).
//
// The store decides races. To fail an order the compensator inserts its failed row, which loses
// to a confirmed row the consumer inserted first; only when the row says failed does it run the
// release script, and the script gives stock back only on the pending -> released transition, so
// every path may run any number of times and stock comes back once.
//
// Compensator is the role: it consumes the dead-letter topic, sweeps reservations past their
// deadline and orders unpaid past their pay_by (one sweeper at a time, under a fenced Redis
// lease), and guards Redis: a campaign whose keys a restart, a failover or a data loss may
// have touched is frozen and rebuilt from the store. Resolver resolves one order (release,
// refund, expiry, payment); Operator carries out the operator's campaign controls (close,
// extend, add stock, cancel, bulk compensation) for the admin endpoints and seckill campaign;
// Auditor checks the invariants I1–I6 for seckill audit.
package compensator
