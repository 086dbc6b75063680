package native

import (
	"bytes"
	"context"
	"fmt"

	"github.com/tetratelabs/wazero/api"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
)

// Instance is one instantiated guest with its exports looked up once. It is owned by one
// goroutine (a slot, or the loader's probe) and never called concurrently.
//
// Any error from a method means the instance is dead (it trapped, exited, ran past its
// deadline, or broke the ABI): Close it and make a fresh one.
type Instance struct {
	mod    api.Module     // owned by the instance's goroutine
	caller *hostfn.Caller // immutable pointer; its Pending belongs to the same goroutine
	call   *callState     // immutable pointer; set by enter before every export call

	// The exports, looked up at Instantiate: a lookup per call costs microseconds and
	// garbage. handle and tick are nil when not exported.
	abiVersion, input, describe, handle, tick api.Function

	stack [2]uint64 // reused by every CallWithStack; owned by the instance's goroutine
}

// ABIVersion calls fleet_abi_version.
func (in *Instance) ABIVersion(ctx context.Context) (int32, error) {
	if err := in.abiVersion.CallWithStack(in.enter(ctx), in.stack[:]); err != nil {
		return 0, fmt.Errorf("native: %s: %w", abi.ExportABIVersion, err)
	}
	return api.DecodeI32(in.stack[0]), nil
}

// Describe calls fleet_describe and returns a copy of the document.
func (in *Instance) Describe(ctx context.Context) ([]byte, error) {
	ctx = in.enter(ctx)
	if err := in.describe.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, fmt.Errorf("native: %s: %w", abi.ExportDescribe, err)
	}
	return in.readPacked(abi.ExportDescribe, in.stack[0])
}

// Handle writes input (an abi.HandleInput) through fleet_input, calls fleet_handle, and
// returns a copy of the HandleResult bytes.
func (in *Instance) Handle(ctx context.Context, input []byte) ([]byte, error) {
	return in.run(ctx, in.handle, abi.ExportHandle, input)
}

// Tick is Handle for loop plugins: fleet_tick with an abi.TickInput.
func (in *Instance) Tick(ctx context.Context, input []byte) ([]byte, error) {
	return in.run(ctx, in.tick, abi.ExportTick, input)
}

func (in *Instance) run(ctx context.Context, fn api.Function, name string, input []byte) ([]byte, error) {
	if fn == nil {
		return nil, fmt.Errorf("native: module does not export %s", name)
	}
	ctx = in.enter(ctx)
	in.caller.Begin()
	in.stack[0] = api.EncodeU32(uint32(len(input)))
	if err := in.input.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, fmt.Errorf("native: %s: %w", abi.ExportInput, err)
	}
	ptr := api.DecodeU32(in.stack[0])
	if !in.mod.Memory().Write(ptr, input) {
		return nil, fmt.Errorf("native: %s(%d) returned buffer %#x outside the guest's memory (%d bytes)",
			abi.ExportInput, len(input), ptr, in.mod.Memory().Size())
	}
	in.stack[0] = api.EncodeU32(uint32(len(input)))
	if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, fmt.Errorf("native: %s: %w", name, err)
	}
	return in.readPacked(name, in.stack[0])
}

// enter readies the instance for an export call under ctx: the host calls it makes are
// attributed to its caller, and its WASI sleeps and writes end with ctx.
func (in *Instance) enter(ctx context.Context) context.Context {
	in.call.enter(ctx)
	return hostfn.WithCaller(ctx, in.caller)
}

// maxResult caps what the host reads back from a guest export.
const maxResult = abi.MaxRequest

// readPacked copies the bytes that a Packed(ptr, len) result names out of guest memory.
func (in *Instance) readPacked(name string, packed uint64) ([]byte, error) {
	ptr, n := abi.Unpack(packed)
	if n > maxResult {
		return nil, fmt.Errorf("native: %s returned %d bytes, limit %d", name, n, maxResult)
	}
	b, ok := in.mod.Memory().Read(ptr, n)
	if !ok {
		return nil, fmt.Errorf("native: %s returned range [%#x, +%d) outside the guest's memory (%d bytes)",
			name, ptr, n, in.mod.Memory().Size())
	}
	return bytes.Clone(b), nil
}

// Close closes the instance. Closing an instance that a deadline already closed is not
// an error.
func (in *Instance) Close(ctx context.Context) error {
	return in.mod.Close(ctx)
}
