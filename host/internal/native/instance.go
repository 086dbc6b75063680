package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/slotstate"
)

// Instance is one instantiated guest with its exports looked up once. It is owned by one
// goroutine (a slot, or the loader's probe) and never called concurrently.
//
// Any error from a method means the instance is dead (it trapped, exited, ran past its
// deadline, or broke the ABI): Close it and make a fresh one. Those of Handle and Tick are
// a *slot.Died, which says which.
type Instance struct {
	mod    api.Module     // owned by the instance's goroutine
	mem    *guestMemory   // mod's memory; owned by the instance's goroutine
	caller *hostfn.Caller // immutable pointer; its Pending belongs to the same goroutine
	call   *callState     // immutable pointer; set by enter before every export call
	stop   *stopFlag      // immutable pointer; nil for a module the rewriter did not rewrite

	// The exports, each looked up at its first call (export) and kept: a lookup per call
	// costs microseconds and garbage, and each lookup makes a call engine with a stack of
	// its own (10 KiB in wazero), so an instance holds only the exports it calls: a slot's,
	// fleet_input and fleet_handle or fleet_tick; the loader's probe, fleet_abi_version
	// and fleet_describe. nil until then, and after it when not exported. Owned by the
	// instance's goroutine.
	abiVersion, input, describe, handle, tick api.Function

	stack [2]uint64 // reused by every CallWithStack; owned by the instance's goroutine
}

// ABIVersion calls fleet_abi_version.
func (in *Instance) ABIVersion(ctx context.Context) (int32, error) {
	ctx = in.enter(ctx)
	disarm := in.stop.arm(ctx)
	defer disarm()
	if err := in.export(&in.abiVersion, abi.ExportABIVersion).CallWithStack(ctx, in.stack[:]); err != nil {
		return 0, fmt.Errorf("native: %s: %w", abi.ExportABIVersion, in.stop.wrap(ctx, err))
	}
	return api.DecodeI32(in.stack[0]), nil
}

// Describe calls fleet_describe and returns a copy of the document.
func (in *Instance) Describe(ctx context.Context) ([]byte, error) {
	ctx = in.enter(ctx)
	disarm := in.stop.arm(ctx)
	defer disarm()
	if err := in.export(&in.describe, abi.ExportDescribe).CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, fmt.Errorf("native: %s: %w", abi.ExportDescribe, in.stop.wrap(ctx, err))
	}
	return in.readPacked(abi.ExportDescribe, in.stack[0])
}

// Handle writes input (an abi.HandleInput) through fleet_input, calls fleet_handle, and
// returns a copy of the HandleResult bytes.
func (in *Instance) Handle(ctx context.Context, input []byte) ([]byte, error) {
	return in.run(ctx, &in.handle, abi.ExportHandle, input)
}

// Tick is Handle for loop plugins: fleet_tick with an abi.TickInput.
func (in *Instance) Tick(ctx context.Context, input []byte) ([]byte, error) {
	return in.run(ctx, &in.tick, abi.ExportTick, input)
}

// run calls export name, kept in *f, with input. Every error is a *slot.Died that says
// why the instance died.
func (in *Instance) run(ctx context.Context, f *api.Function, name string, input []byte) ([]byte, error) {
	fn := in.export(f, name)
	if fn == nil {
		return nil, badResult(fmt.Errorf("native: module does not export %s", name))
	}
	ctx = in.enter(ctx)
	disarm := in.stop.arm(ctx)
	defer disarm()
	in.caller.Begin()
	in.stack[0] = api.EncodeU32(uint32(len(input)))
	if err := in.export(&in.input, abi.ExportInput).CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, in.died(ctx, abi.ExportInput, err)
	}
	ptr := api.DecodeU32(in.stack[0])
	if !in.mod.Memory().Write(ptr, input) {
		return nil, badResult(fmt.Errorf("native: %s(%d) returned buffer %#x outside the guest's memory (%d bytes)",
			abi.ExportInput, len(input), ptr, in.mod.Memory().Size()))
	}
	in.stack[0] = api.EncodeU32(uint32(len(input)))
	if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, in.died(ctx, name, err)
	}
	b, err := in.readPacked(name, in.stack[0])
	if err != nil {
		return nil, badResult(err)
	}
	return b, nil
}

// export is the function export name, which *f keeps once looked up; nil when the
// module does not export it. Instantiate's checkModule made sure that the required ones
// are exported with their signatures.
func (in *Instance) export(f *api.Function, name string) api.Function {
	if *f == nil {
		*f = in.mod.ExportedFunction(name)
	}
	return *f
}

// enter readies the instance for an export call under ctx: the host calls it makes are
// attributed to its caller, and its WASI sleeps and writes end with ctx.
func (in *Instance) enter(ctx context.Context) context.Context {
	in.call.enter(ctx)
	return hostfn.WithCaller(ctx, in.caller)
}

// died is the error of export name's call under ctx that failed with err, classified by
// its type and the instance's state, never by its text: wazero appends the wasm stack
// trace, which names the guest's functions. The deadline is not told here: the caller
// owns the call's context, and a guest can proc_exit with wazero's deadline exit code
// (sys.ExitCodeDeadlineExceeded) to pass for one; so the text of a proc_exit while ctx
// still runs is the host's own, not wazero's "module closed with context deadline
// exceeded". See host/RATIONALE.md, "Why does a slot event carry its death's reason?".
//
// A stack overflow past the rewriter's budget is DeathStack, told by the budget global;
// wazero's own (a module compiled without the rewrite) traps like any other, since
// wazero reports traps only as an internal type.
func (in *Instance) died(ctx context.Context, name string, err error) error {
	death, err := Classify(ctx, in.stop.wrap(ctx, err))
	if death != slotstate.DeathHostPanic && MemoryFull(in.mod.Memory(), 0) {
		death = slotstate.DeathMemory
	}
	if death == slotstate.DeathTrap && StackLimitHit(in.mod) {
		death, err = slotstate.DeathStack, fmt.Errorf("%w: %w", ErrStackLimit, err)
	}
	return &slot.Died{Death: death, Err: fmt.Errorf("native: %s: %w", name, err)}
}

// Classify is the death of a guest call under ctx that failed with err, from err's type
// alone (died says why not its text): a proc_exit while ctx runs is DeathExit, with the
// host's own words for err; a Go runtime error that wazero recovered is a host function's,
// DeathHostPanic; anything else, a deadline's close included (the caller tells those), is
// DeathTrap. The Extism transport classifies its calls with it too.
func Classify(ctx context.Context, err error) (slotstate.Death, error) {
	var exit *sys.ExitError
	var hostBug runtime.Error
	switch {
	case errors.As(err, &exit) && ctx.Err() == nil:
		return slotstate.DeathExit, fmt.Errorf("the guest called proc_exit(%d)", exit.ExitCode())
	case errors.As(err, &exit):
		// ctx closed the module: the caller's deadline or drain, which the caller tells.
	case errors.As(err, &hostBug):
		// wazero recovered a Go runtime error: a host function's, not the guest's.
		return slotstate.DeathHostPanic, err
	}
	return slotstate.DeathTrap, err
}

// ErrStackLimit is wrapped by the error of a guest call that died because its nested
// calls spent the instance's stack budget (stackBudget, set by the module rewriter); its
// death is slotstate.DeathStack.
var ErrStackLimit = errors.New("the guest's call stack passed its limit")

// StackLimitHit reports whether the rewriter's stack check trapped in mod. That check
// alone sets the budget global to stackExhausted, and no guest instruction can reach the
// global, so the reason comes from the instance's state, never from text the guest
// controls. The Extism transport tells its stack deaths with it too.
func StackLimitHit(mod api.Module) bool {
	g := mod.ExportedGlobal(stackGlobal)
	return g != nil && int32(uint32(g.Get())) == stackExhausted
}

func badResult(err error) error { return &slot.Died{Death: slotstate.DeathBadResult, Err: err} }

// MemoryFull reports whether mem, which began at base bytes, is within memoryHeadroom of
// its maximum (the module's own, or the host's limit) for the room it had to grow. wasm
// has no out-of-memory trap: memory.grow answers -1 and the guest dies its own way (Go's
// runtime throws "out of memory" and aborts at unreachable, C and Rust abort likewise, or
// proc_exit), so a guest that dies this close to its limit is counted as dead of it. A
// guest's memory has base 0; the Extism transport's kernel memory begins at 1 MiB.
func MemoryFull(mem api.Memory, base uint64) bool {
	if mem == nil {
		return false
	}
	pages, _ := mem.Definition().Max()
	limit := uint64(pages) * wasmPage
	if limit <= base {
		return false
	}
	return uint64(mem.Size())+memoryHeadroom(limit-base) > limit
}

// memoryHeadroom is how close to its limit a memory with room bytes to grow counts as
// full: 4 MiB, the step by which Go's runtime grows its heap on wasm (so its failed grow
// leaves up to that much unused), or a quarter of a smaller room, so that a small guest
// under a small limit is not counted as full.
func memoryHeadroom(room uint64) uint64 { return min(4<<20, room/4) }

const wasmPage = 65536

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

// Close closes the instance and releases its memory. Closing an instance that its
// runtime already closed is not an error.
func (in *Instance) Close(ctx context.Context) error {
	err := in.mod.Close(ctx)
	in.mem.unmap()
	return err
}
