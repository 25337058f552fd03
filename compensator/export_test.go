package compensator

// SweeperLease is sweeperLease, for the tests.
var SweeperLease = sweeperLease

// SetSnapshots replaces what a rebuild reads the store through, for a test to act while it
// holds a campaign.
func SetSnapshots(c *Compensator, s Snapshotter) { c.snapshots = s }
