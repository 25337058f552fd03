package compensator

import "github.com/prometheus/client_golang/prometheus/testutil"

// SweeperLease is sweeperLease, for the tests.
var SweeperLease = sweeperLease

// SetSnapshots replaces what a rebuild reads the store through, for a test to act while it
// holds a campaign.
func SetSnapshots(c *Compensator, s Snapshotter) { c.snapshots = s }

// SetSweeper replaces the sweeper's Redis calls, for a test to count or fail them.
func SetSweeper(c *Compensator, s Sweeper) { c.sweeper = s }

// SetFencer replaces what the sweeper takes its fencing tokens from, for a test to act between
// taking the lease and taking the token.
func SetFencer(c *Compensator, f Fencer) { c.fencer = f }

// Resharded is resharded, for the tests.
var Resharded = resharded

// SweepParallel is sweepParallel, for the tests.
const SweepParallel = sweepParallel

// SetSweepPage sets how many orders a sweep takes of each of the store's lists, for a test to
// fill a page with a few.
func SetSweepPage(c *Compensator, n int) { c.page = n }

// SetRebuilder replaces what the guard writes Redis through, for a test to fail a shard's calls.
func SetRebuilder(c *Compensator, r Rebuilder) { c.rebuilder = r }

// SweeperLeaseHeld reads seckill_sweeper_lease_held.
func SweeperLeaseHeld() float64 { return testutil.ToFloat64(sweeperLeaseHeld) }
