//go:build !failpoints

package failpoint

// Inject does nothing: this build has no failpoints.
func Inject(string) {}
