// Package compensator resolves every reservation that will not become an order: events the
// consumer dead-lettered, reservations past their deadline whose event never reached the store
// (the sweeper), and what an operator asks for (release a stuck order, refund a confirmed one).
//
// The store decides races. To fail an order the compensator inserts its failed row, which loses
// to a confirmed row the consumer inserted first; only when the row says failed does it run the
// release script, and the script gives stock back only on the pending -> released transition, so
// every path may run any number of times and stock comes back once.
package compensator
