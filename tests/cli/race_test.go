//go:build race

package cli

// raceEnabled builds the binary under test with -race too, so that a race in the daemon
// fails these tests as one in a test would.
const raceEnabled = true
