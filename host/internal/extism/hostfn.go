package extism

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"

	extism "github.com/extism/go-sdk"

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

// hostFunctions are fleet's operations as Extism host functions of UserModule, each
// (request i64) -> (reply i64): the offsets of two Extism memory blocks.
func hostFunctions(core *hostfn.Core, log *slog.Logger) []extism.HostFunction {
	var fns []extism.HostFunction
	for _, op := range userOps() {
		f := extism.NewHostFunctionWithStack(string(op), func(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
			stack[0] = serve(ctx, core, log, p, op, stack[0])
		}, []extism.ValueType{extism.ValueTypePTR}, []extism.ValueType{extism.ValueTypePTR})
		f.SetNamespace(UserModule)
		fns = append(fns, f)
	}
	return fns
}

// serve runs op with the request in the block at offset and returns the offset of a new
// block holding the reply envelope. Every failure is an envelope the guest reads: a
// request block that is not one, or is over abi.MaxRequest, is refused before the
// operation runs. The only exception is a reply the kernel cannot allocate (its memory
// is at the limit): serve then returns 0, no block, which abi/EXTISM.md tells the guest
// to read as Unavailable.
func serve(ctx context.Context, core *hostfn.Core, log *slog.Logger, p *extism.CurrentPlugin, op abi.Op, offset uint64) (reply uint64) {
	defer func() {
		// Last line: the core recovers its own panics; this catches the glue's.
		if r := recover(); r != nil {
			log.Error("extism: host function glue panicked; answering Internal",
				"op", string(op), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			reply = write(ctx, p, abi.EncodeError(abi.Errorf(abi.Internal, "host function %s failed", op)))
		}
	}()
	req, e := read(ctx, p, offset)
	if e != nil {
		return write(ctx, p, abi.EncodeError(e))
	}
	return write(ctx, p, core.Call(ctx, op, req))
}

// read copies the request out of the block at offset. Offset 0, or one that is not the
// start of a block (the kernel gives it length 0), is an empty request, which the core
// refuses as a ValueError.
func read(ctx context.Context, p *extism.CurrentPlugin, offset uint64) ([]byte, *abi.Error) {
	if offset == 0 {
		return nil, nil
	}
	n, err := p.LengthWithContext(ctx, offset)
	if err != nil {
		return nil, abi.Errorf(abi.Unavailable, "the request block could not be read: %v", err)
	}
	if n == 0 {
		return nil, nil
	}
	if n > abi.MaxRequest {
		return nil, abi.Errorf(abi.LimitExceeded, "request is %d bytes, limit %d", n, abi.MaxRequest)
	}
	if offset > math.MaxUint32 {
		return nil, abi.Errorf(abi.ValueError, "request offset %d is outside Extism memory", offset)
	}
	view, ok := p.Memory().Read(uint32(offset), uint32(n))
	if !ok {
		return nil, abi.Errorf(abi.ValueError, "request block [%d, +%d) is outside Extism memory", offset, n)
	}
	// Copy out: the core keeps slices of the request past this call.
	return bytes.Clone(view), nil
}

// write allocates a block holding b and returns its offset, or 0 when the kernel cannot.
func write(ctx context.Context, p *extism.CurrentPlugin, b []byte) uint64 {
	offset, err := p.AllocWithContext(ctx, uint64(len(b)))
	if err != nil || offset == 0 || offset > math.MaxUint32 {
		return 0
	}
	if !p.Memory().Write(uint32(offset), b) {
		return 0
	}
	return offset
}
