//go:build !(linux || darwin)

package native

import "github.com/tetratelabs/wazero/experimental"

// guestMemory is linux's and darwin's (memory_mmap.go); elsewhere an instance's memory
// is wazero's own, a Go slice that each grow copies.
type guestMemory struct{}

func reserveMemory(uint64) (*guestMemory, error) { return nil, nil }

// allocator is none: wazero allocates the memory itself.
func (*guestMemory) allocator() experimental.MemoryAllocator { return nil }

func (*guestMemory) unmap() {}
