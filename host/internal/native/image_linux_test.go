package native

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/fleethost/fleet/internal/testutil"
)

// releaseWAT is a guest with data on three pages of the system's, whose _initialize reads
// the first and the third (into a global, so that the compiler keeps the loads) and writes
// over the second.
const releaseWAT = `(module
  (memory (export "memory") 1)
  (data (i32.const 256) "read")
  (data (i32.const 4352) "data")
  (data (i32.const 8448) "also")
  (global $read (mut i32) (i32.const 0))
  (func (export "_initialize")
    (global.set $read (i32.add (i32.load (i32.const 256)) (i32.load (i32.const 8448))))
    (i32.store (i32.const 4352) (i32.const 0x21212121)))
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 16384))
  (func (export "fleet_describe") (result i64) (i64.const 0)))`

// TestImageReleasesWhatTheStartRead: once an instance's _initialize has run, the pages of
// its image that it only read are no longer mapped in it, and read the image again; the
// page it wrote stays its own, with what it wrote.
func TestImageReleasesWhatTheStartRead(t *testing.T) {
	rt := newTestRuntime(t, readFile(t, testutil.WAT(t, releaseWAT)), Params{MemoryLimitPages: 16})
	if rt.image == nil {
		t.Fatal("the module has no memory image; the test's premise is one")
	}
	if _, err := pagemap(); err != nil {
		t.Fatalf("this process cannot read its pagemap, which the release needs: %v", err)
	}
	a := newTestInstanceOf(t, rt, "a")
	for page, want := range []string{"released", "the instance's own", "released"} {
		if got := pageState(t, a, page); got != want {
			t.Errorf("page %d after _initialize: %s, want %s", page, got, want)
		}
	}
	assertMemory(t, a, 256, "read")
	assertMemory(t, a, 4352, "!!!!")
	assertMemory(t, a, 8448, "also")
	b := newTestInstanceOf(t, rt, "b")
	assertMemory(t, b, 4352, "!!!!") // its own _initialize wrote it too
	b.mod.Memory().Write(4352, []byte("data"))
	assertMemory(t, a, 4352, "!!!!")
}

// pageState says what /proc/self/pagemap has of the system's page number page of in's
// memory: "released" (not mapped), "the image's" (mapped from the memfd) or "the
// instance's own" (a copy of its own).
func pageState(t *testing.T, in *Instance, page int) string {
	t.Helper()
	f, _ := pagemap()
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(in.mem.mapped))) + uintptr(page*imagePage)
	var e [8]byte
	if _, err := f.ReadAt(e[:], int64(addr/imagePage*8)); err != nil {
		t.Fatal(err)
	}
	switch v := binary.LittleEndian.Uint64(e[:]); {
	case v&(pmPresent|pmSwap) == 0:
		return "released"
	case v&pmPresent != 0 && v&pmFile != 0:
		return "the image's"
	default:
		return "the instance's own"
	}
}
