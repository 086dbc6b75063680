//go:build race

package cli

// raceEnabled builds raceBin, which runs the daemons of raceDaemons, with -race too, so
// that a race in the daemon fails these tests as one in a test would.
const raceEnabled = true
