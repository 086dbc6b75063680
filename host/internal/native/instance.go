package native

import (
	"bytes"
	"context"
	"errors"
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

	// The exports, looked up at Instantiate: a lookup per call costs microseconds and
	// garbage. handle and tick are nil when not exported.
	abiVersion, input, describe, handle, tick api.Function

	stack [2]uint64 // reused by every CallWithStack; owned by the instance's goroutine
}

// ABIVersion calls fleet_abi_version.
func (in *Instance) ABIVersion(ctx context.Context) (int32, error) {
	if err := in.abiVersion.CallWithStack(hostfn.WithCaller(ctx, in.caller), in.stack[:]); err != nil {
		return 0, in.callError(abi.ExportABIVersion, err)
	}
	return api.DecodeI32(in.stack[0]), nil
}

// Describe calls fleet_describe and returns a copy of the document.
func (in *Instance) Describe(ctx context.Context) ([]byte, error) {
	ctx = hostfn.WithCaller(ctx, in.caller)
	if err := in.describe.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, in.callError(abi.ExportDescribe, err)
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
	ctx = hostfn.WithCaller(ctx, in.caller)
	in.caller.Pending = nil
	in.stack[0] = api.EncodeU32(uint32(len(input)))
	if err := in.input.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, in.callError(abi.ExportInput, err)
	}
	ptr := api.DecodeU32(in.stack[0])
	if !in.mod.Memory().Write(ptr, input) {
		return nil, fmt.Errorf("native: %s(%d) returned buffer %#x outside the guest's memory (%d bytes)",
			abi.ExportInput, len(input), ptr, in.mod.Memory().Size())
	}
	in.stack[0] = api.EncodeU32(uint32(len(input)))
	if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, in.callError(name, err)
	}
	return in.readPacked(name, in.stack[0])
}

// ErrStackLimit is wrapped by the error of a guest call that died because its nested
// calls spent the instance's stack budget (stackBudget, set by the module rewriter).
// Test for it with errors.Is.
var ErrStackLimit = errors.New("native: the guest's call stack passed its limit")

// callError is the error of a call of export that failed with err, wrapping
// ErrStackLimit when the rewriter's stack check trapped. That check alone sets the budget
// global to stackExhausted, and no guest instruction can reach the global, so the reason
// comes from the instance's state, never from text the guest controls.
func (in *Instance) callError(export string, err error) error {
	if g := in.mod.ExportedGlobal(stackGlobal); g != nil && int32(uint32(g.Get())) == stackExhausted {
		return fmt.Errorf("native: %s: %w: %w", export, ErrStackLimit, err)
	}
	return fmt.Errorf("native: %s: %w", export, err)
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
