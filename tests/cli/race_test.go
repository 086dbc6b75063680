//go:build race

package cli

// raceEnabled builds the daemon under test with -race too (daemonBin), so that a race in
// it fails these tests as one in a test would.
const raceEnabled = true
