package native

import (
	"fmt"
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

// close closes the memfd; the instances' mappings keep the image alive.
func (img *memoryImage) close() error { return unix.Close(img.fd) }
