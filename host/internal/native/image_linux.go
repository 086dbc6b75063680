package native

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// memoryImage is a module's memory image (splitData) in a sealed memfd, which each
// instance maps privately over the start of its memory: a page is the file's, shared by
// every instance, until the guest writes it, when the kernel copies it for that instance
// alone. Safe for concurrent use.
type memoryImage struct {
	fd   int     // immutable; closed by close
	size uintptr // bytes, a multiple of imagePage; immutable
}

// newMemoryImage writes image into a memfd and seals it, so that nothing can change it
// under the instances that map it.
func newMemoryImage(image []byte) (*memoryImage, error) {
	fd, err := unix.MemfdCreate("fleet-guest-memory-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("native: memfd for the guest's memory image: %w", err)
	}
	for b := image; len(b) > 0; {
		n, err := unix.Write(fd, b)
		if err != nil {
			_ = unix.Close(fd)
			return nil, fmt.Errorf("native: write the guest's memory image: %w", err)
		}
		b = b[n:]
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("native: seal the guest's memory image: %w", err)
	}
	return &memoryImage{fd: fd, size: uintptr(len(image))}, nil
}

// mapInto maps the image copy-on-write over the start of mem, which holds at least its
// size: the guest's memory at instantiation, before any of its code runs.
func (img *memoryImage) mapInto(mem *guestMemory) error {
	if img.size == 0 {
		return nil
	}
	if uintptr(len(mem.mapped)) < img.size {
		return fmt.Errorf("native: the guest's memory image is %d bytes, over its limit of %d", img.size, len(mem.mapped))
	}
	_, err := unix.MmapPtr(img.fd, 0, unsafe.Pointer(unsafe.SliceData(mem.mapped)), img.size,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED)
	if err != nil {
		return fmt.Errorf("native: map the guest's memory image: %w", err)
	}
	return nil
}

// releaseRead drops mem's page-table entries of the image's pages that the instance has
// only read; its owner calls it once the instance's _initialize has run. Such a page is
// still the memfd's (the kernel gives the instance a copy of its own at its first write),
// so dropping its entry loses nothing: the instance's next read of it maps the memfd's
// page again, from the page cache, with no copy. A Go guest's start reads ~1.8 MiB of its
// image that its tasks then mostly leave alone (the noop's first task maps 0.3 MiB of it
// again); each instance that keeps them mapped counts them in the process's RSS, once per
// instance, though the machine holds them once. See host/RATIONALE.md, "What does a slot
// cost in memory?".
//
// /proc/self/pagemap tells each page apart: present and the file's (bit 61), the
// instance's own copy (present, not the file's, or swapped out), or never touched. A
// range given to MADV_DONTNEED holds only pages of the first and the last kind: on a page
// of the instance's own it would discard what the guest wrote, and its next read would
// see the image again. No code of the instance runs between the read of pagemap and the
// madvise (the owner's goroutine does both, between two calls), so no page becomes the
// instance's in between. Where pagemap cannot be read, or the system's page is not the
// image's, every page stays mapped.
func (img *memoryImage) releaseRead(mem *guestMemory) {
	f, err := pagemap()
	if err != nil || img.size == 0 || os.Getpagesize() != imagePage {
		return
	}
	pages := int(img.size / imagePage)
	entries := make([]byte, 8*pages)
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem.mapped)))
	if _, err := f.ReadAt(entries, int64(base/imagePage*8)); err != nil {
		return
	}
	start, last := -1, -1 // the run being gathered: its first and last page of the file's
	flush := func() {
		if start >= 0 {
			_ = unix.Madvise(mem.mapped[start*imagePage:(last+1)*imagePage], unix.MADV_DONTNEED)
		}
		start, last = -1, -1
	}
	for i := range pages {
		e := binary.LittleEndian.Uint64(entries[8*i:])
		switch {
		case e&(pmPresent|pmSwap) == 0: // never touched: a run may cross it
		case e&pmPresent != 0 && e&pmFile != 0 && e&pmSwap == 0:
			if start < 0 {
				start = i
			}
			last = i
		default: // the instance's own
			flush()
		}
	}
	flush()
}

// The bits of a /proc/self/pagemap entry that releaseRead reads
// (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63
	pmSwap    = 1 << 62
	pmFile    = 1 << 61 // a page of the file's, or shared anonymous memory (which no instance has)
)

// OpenProcessFiles opens the files of the process itself that the engine reads, now
// rather than at its first instance's start: a worker process calls it before it
// confines itself, after which it may open no file. Where one cannot be opened, what
// reads it does without it (releaseRead).
func OpenProcessFiles() { _, _ = pagemap() }

// pagemap is this process's /proc/self/pagemap, opened once and kept: every instance's
// releaseRead reads it (ReadAt is safe for concurrent use).
var pagemap = sync.OnceValues(func() (*os.File, error) { return os.Open("/proc/self/pagemap") })

// close closes the memfd; the instances' mappings keep the image alive.
func (img *memoryImage) close() error { return unix.Close(img.fd) }
