//go:build linux || darwin

package native

import (
	"fmt"
	"sync"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// guestMemory is one instance's linear memory, reserved at its limit when the instance
// is made and committed page by page as the guest first touches each page: an idle
// slot holds only the pages its guest wrote, and a grow neither copies the memory nor
// leaves the old copy for the Go collector (wazero's own memory is a Go slice that
// every grow reallocates and copies whole). See host/RATIONALE.md, "What does a slot
// cost in memory?".
//
// The mapping is anonymous and private, and reserved without swap accounting
// (MAP_NORESERVE): the kernel commits a page when it is first written. wazero never
// lets the guest past the memory's current size, which it bounds by the limit. On other
// systems (memory_other.go) an instance's memory is wazero's own.
type guestMemory struct {
	// mu orders Free, which a Runtime's Close may call from any goroutine, and unmap:
	// a Free after the unmap must not drop the pages of whatever the system maps at the
	// same address next.
	mu     sync.Mutex
	mapped []byte // the whole reservation; nil once unmapped; written under mu
}

// reserveMemory maps limit bytes for one instance's memory.
func reserveMemory(limit uint64) (*guestMemory, error) {
	b, err := unix.Mmap(-1, 0, int(limit), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("native: reserve %d MiB of address space for the guest's memory: %w", limit>>20, err)
	}
	return &guestMemory{mapped: b}, nil
}

// allocator hands wazero this reservation as the memory of the one instance it makes.
func (m *guestMemory) allocator() experimental.MemoryAllocator {
	return experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		if max > uint64(len(m.mapped)) {
			// The limit bounds every memory's maximum (WithMemoryLimitPages), so this
			// is a bug of the host's, not the guest's.
			panic(fmt.Sprintf("native: wazero asked for a memory of up to %d bytes, over the %d reserved", max, len(m.mapped)))
		}
		return m
	})
}

// Reallocate implements experimental.LinearMemory: the memory grows in place.
func (m *guestMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.mapped)) {
		return nil // memory.grow answers -1
	}
	return m.mapped[:size]
}

// Free implements experimental.LinearMemory: wazero calls it when the instance closes,
// which a Runtime's Close does while a slot's call may still run on another goroutine
// (a drain past its grace period). So it returns the pages to the system
// (MADV_DONTNEED: a later read sees zeros, a write commits a fresh page) and keeps the
// mapping, which unmap releases once no call can run.
func (m *guestMemory) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mapped != nil {
		_ = unix.Madvise(m.mapped, unix.MADV_DONTNEED)
	}
}

// unmap releases the reservation. The instance's owner calls it after closing the
// instance, when no call of it runs.
func (m *guestMemory) unmap() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mapped != nil {
		_ = unix.Munmap(m.mapped)
		m.mapped = nil
	}
}
