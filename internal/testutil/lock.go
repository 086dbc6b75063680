package testutil

import (
	"fmt"
	"os"
	"syscall"
)

// lock takes an exclusive lock on the file path (made if missing) and returns its
// release. It is a file lock (flock), not a mutex, because the test binaries of several
// packages run at once and share the cache: the one that builds a guest holds the lock
// while the others wait for it, then find the guest built rather than build it again.
// flock excludes two goroutines of one process too, each with its own open of the file.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testutil: lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR { // a signal interrupted the wait: wait again
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("testutil: lock %s: flock: %w", path, err)
	}
	return func() { f.Close() }, nil // closing the file releases its lock
}
