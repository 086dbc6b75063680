package extism

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
)

// userOps are the operations offered in UserModule: every abi.Op but reply_fetch, which
// an Extism reply, a memory block of its own length, never needs.
func userOps() []abi.Op {
	ops := make([]abi.Op, 0, len(abi.Ops))
	for _, op := range abi.Ops {
		if op != abi.OpReplyFetch {
			ops = append(ops, op)
		}
	}
	return ops
}

// blocks is the Extism memory that fleet's operations read their request from and
// write their reply to: the host's kernel, and the SDK's in the differential test.
type blocks interface {
	// block is the bytes of the block at offset, and whether one begins there.
	block(offset uint64) ([]byte, bool)
	// allocBytes is the offset of a new block holding b, 0 when there is no room.
	allocBytes(b []byte) uint64
}

// instantiateUser defines UserModule in r: fleet's operations, each (request i64) ->
// (reply i64), the offsets of two blocks of the calling instance's kernel.
func instantiateUser(ctx context.Context, r wazero.Runtime, core hostfn.Dispatcher, log *slog.Logger) error {
	b := r.NewHostModuleBuilder(UserModule)
	for _, op := range userOps() {
		b.NewFunctionBuilder().WithGoFunction(api.GoFunc(func(ctx context.Context, stack []uint64) {
			stack[0] = serve(ctx, core, log, kernelOf(ctx), op, stack[0])
		}), userSig, userSig).Export(string(op))
	}
	_, err := b.Instantiate(ctx)
	return err
}

// serve runs op with the request in the block at offset and returns the offset of a new
// block holding the reply envelope. Every failure is an envelope the guest reads: a
// request block that is not one, or is over abi.MaxRequest, is refused before the
// operation runs. The only exception is a reply the kernel cannot allocate (its memory
// is at the limit): serve then returns 0, no block, which abi/EXTISM.md tells the guest
// to read as Unavailable.
func serve(ctx context.Context, core hostfn.Dispatcher, log *slog.Logger, mem blocks, op abi.Op, offset uint64) (reply uint64) {
	defer func() {
		// Last line: the core recovers its own panics; this catches the glue's.
		if r := recover(); r != nil {
			log.Error("extism: host function glue panicked; answering Internal",
				"op", string(op), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			reply = mem.allocBytes(abi.EncodeError(abi.Errorf(abi.Internal, "host function %s failed", op)))
		}
	}()
	req, e := read(mem, offset)
	if e != nil {
		return mem.allocBytes(abi.EncodeError(e))
	}
	return mem.allocBytes(core.Call(ctx, op, req))
}

// read copies the request out of the block at offset. Offset 0, or one that is not the
// start of a block, is an empty request, which the core refuses as a ValueError.
func read(mem blocks, offset uint64) ([]byte, *abi.Error) {
	b, _ := mem.block(offset)
	if len(b) > abi.MaxRequest {
		return nil, abi.Errorf(abi.LimitExceeded, "request is %d bytes, limit %d", len(b), abi.MaxRequest)
	}
	// Copy out: the core keeps slices of the request past this call.
	return bytes.Clone(b), nil
}
