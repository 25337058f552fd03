package compensator

// SweeperLease is sweeperLease, for the tests.
var SweeperLease = sweeperLease
