//go:build !linux

package native

import "errors"

// memoryImage is linux's (a memfd); elsewhere a module runs with its data segments,
// which wazero copies into each instance.
type memoryImage struct{}

func newMemoryImage([]byte) (*memoryImage, error) {
	return nil, errors.New("native: memory images need linux's memfd")
}

func (*memoryImage) mapInto(*guestMemory) error { return nil }
func (*memoryImage) releaseRead(*guestMemory)   {}
func (*memoryImage) close() error               { return nil }

// OpenProcessFiles opens nothing: only linux's images read the process's pagemap.
func OpenProcessFiles() {}
