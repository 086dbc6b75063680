package abi

import "fmt"

// CheckVersion reports whether a host speaking MinVersion..Version can run a guest built
// for ABI version guest, with a message that names both sides when it cannot.
func CheckVersion(guest int32) error {
	if guest < MinVersion || guest > Version {
		return fmt.Errorf("abi: version mismatch: host speaks %d..%d, guest built for %d", MinVersion, Version, guest)
	}
	return nil
}
