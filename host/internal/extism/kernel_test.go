package extism

import (
	"io"
	"testing"
)

// TestKernelBlocks: the kernel's blocks, as Extism's are: alloc(0) and offset 0 are no
// block; a block's length is what was asked, at its start only; freeing the highest
// lowers what the guest reaches, and a freed block of a size is reused for that size;
// an alloc past the limit answers 0 and is recorded; a call's start forgets every block.
func TestKernelBlocks(t *testing.T) {
	k := newKernel(64<<10, nil, io.Discard)
	if k.alloc(0) != 0 || k.length(0) != 0 {
		t.Fatal("alloc(0) or length(0) is a block")
	}
	a, b, c := k.alloc(5), k.alloc(40), k.alloc(7)
	if a == 0 || b == 0 || c == 0 || k.length(a) != 5 || k.length(b) != 40 || k.length(a+1) != 0 {
		t.Fatalf("blocks %d %d %d of lengths %d %d (and %d inside the first); want 5, 40, 0",
			a, b, c, k.length(a), k.length(b), k.length(a+1))
	}
	k.release(b)
	if got := k.alloc(33); got != b || k.length(b) != 33 {
		t.Fatalf("alloc(33) after freeing a 40-byte block = %d (length %d), want the block %d reused", got, k.length(got), b)
	}
	top := k.top
	k.release(c)
	if k.top >= top || k.length(c) != 0 {
		t.Fatalf("freeing the highest block left top at %d (was %d) and its length %d", k.top, top, k.length(c))
	}
	if _, ok := k.bytes(c, 1); ok {
		t.Fatal("the guest reaches a byte past the highest block")
	}
	if k.alloc(64<<10) != 0 || !k.refused {
		t.Fatal("an alloc past the limit was granted, or not recorded")
	}
	if !k.begin([]byte("in")) || k.length(b) != 0 || k.refused || k.input.n != 2 || k.length(k.input.at) != 2 {
		t.Fatal("a call's start kept the blocks or the refusal, or has no input block")
	}
	if k.begin(make([]byte, 64<<10)) {
		t.Fatal("an input past the limit fits")
	}
}

// TestKernelBounded: a guest that allocates the smallest blocks until the kernel refuses
// holds no more than the limit in the arena, and a quarter of it in bookkeeping.
func TestKernelBounded(t *testing.T) {
	const limit = 1 << 20
	k := newKernel(limit, nil, io.Discard)
	for k.alloc(1) != 0 {
	}
	if len(k.mem) > limit || len(k.meta)*4 > limit/4 {
		t.Fatalf("the arena is %d bytes and its bookkeeping %d, limit %d", len(k.mem), len(k.meta)*4, limit)
	}
}
