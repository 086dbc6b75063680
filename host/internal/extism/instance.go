package extism

import (
	"context"
	"fmt"
	"io"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero/api"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/native"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/slotstate"
)

// Instance is one instantiated Extism plugin (its kernel and its module). It is owned by
// one goroutine (a slot, or the loader's probe) and never called concurrently.
//
// An error from Handle or Tick is a *slot.Died: the instance is dead, Close it and make
// a fresh one. An error the guest reports the Extism way (error_set, or a non-zero
// return code) is not a death: it fails the task (failed).
type Instance struct {
	p       *extism.Plugin // owned by the instance's goroutine
	mod     api.Module     // the module, once a call of a fleet export has begun (death.go)
	base    uint64         // the size of the kernel's memory at instantiation
	caller  *hostfn.Caller // immutable pointer
	enter   func(context.Context)
	exports map[string]bool // immutable: the runtime's
}

// Instantiate makes a fresh instance, in the sandbox of native's instances, whose host
// calls are attributed to caller; its log lines (Extism's log_info and above) and its
// WASI stdout and stderr go to out (nil discards them). name names it in errors. The
// SDK runs a WASI reactor's _initialize (or a command's constructors) at the instance's
// first call, under that call's deadline.
func (rt *Runtime) Instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (*Instance, error) {
	if out == nil {
		out = io.Discard
	}
	cfg, enter := native.Sandbox(out)
	enter(ctx)
	p, err := rt.compiled.Instance(hostfn.WithCaller(ctx, caller), extism.PluginInstanceConfig{ModuleConfig: cfg})
	if err != nil {
		return nil, fmt.Errorf("extism: instantiate %s: %w", name, err)
	}
	p.SetLogger(func(level extism.LogLevel, msg string) {
		fmt.Fprintf(out, "extism %s: %s\n", level, msg)
	})
	return &Instance{p: p, base: uint64(p.Memory().Size()), caller: caller, enter: enter, exports: rt.exports}, nil
}

// Describe calls fleet_describe with no input and returns its output.
func (in *Instance) Describe(ctx context.Context) ([]byte, error) {
	out, failed, err := in.call(ctx, abi.ExportDescribe, nil)
	if err != nil {
		return nil, err
	}
	if failed != "" {
		return nil, fmt.Errorf("extism: %s failed: %s", abi.ExportDescribe, failed)
	}
	if err := checkOutput(abi.ExportDescribe, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Handle calls fleet_handle with input (an abi.HandleInput) and returns its output, a
// HandleResult. A call the guest fails the Extism way is a HandleResult that fails the
// task, with the guest's message as the reason.
func (in *Instance) Handle(ctx context.Context, input []byte) ([]byte, error) {
	return in.run(ctx, abi.ExportHandle, input)
}

// Tick is Handle for loop plugins: fleet_tick with an abi.TickInput.
func (in *Instance) Tick(ctx context.Context, input []byte) ([]byte, error) {
	return in.run(ctx, abi.ExportTick, input)
}

func (in *Instance) run(ctx context.Context, export string, input []byte) ([]byte, error) {
	if !in.exports[export] {
		return nil, &slot.Died{Death: slotstate.DeathBadResult, Err: fmt.Errorf("extism: module does not export %s", export)}
	}
	in.caller.Begin()
	out, failed, err := in.call(ctx, export, input)
	if err != nil {
		death, err := death(ctx, in.mod, in.p.Memory(), in.base, err)
		return nil, &slot.Died{Death: death, Err: fmt.Errorf("extism: %s: %w", export, err)}
	}
	if !in.kernelSound() {
		return nil, &slot.Died{Death: slotstate.DeathBadResult, Err: fmt.Errorf("extism: %s left the Extism kernel's allocator past the kernel's memory", export)}
	}
	if failed != "" {
		return abi.HandleResult{Outcome: abi.OutcomeFail, Reason: failed}.AppendJSON(nil), nil
	}
	if err := checkOutput(export, out); err != nil {
		return nil, &slot.Died{Death: slotstate.DeathBadResult, Err: err}
	}
	return out, nil
}

// The Extism kernel's allocator (the MemoryRoot of the SDK's extism-runtime.wasm, at
// address 1): its position, the bytes of blocks in use, is the u64 at 9, and the blocks
// begin at 65. The guest can write both (Extism's store_u64 writes anywhere in the
// kernel's memory). The SDK begins each call by zeroing the blocks in use, and a
// position past the memory makes that trap and the SDK print the trap to the process's
// stdout, past every log limit; so an instance left that way is dead before its next
// call.
const kernelPositionAt, kernelBlocksAt = 9, 65

// kernelSound reports whether the kernel's allocator position lies within its memory.
func (in *Instance) kernelSound() bool {
	mem := in.p.Memory()
	pos, ok := mem.ReadUint64Le(kernelPositionAt)
	return ok && pos <= uint64(mem.Size())-kernelBlocksAt
}

// checkOutput caps what the host takes from an export, as native's maxResult does.
func checkOutput(export string, out []byte) error {
	if len(out) > abi.MaxRequest {
		return fmt.Errorf("extism: %s returned %d bytes, limit %d", export, len(out), abi.MaxRequest)
	}
	return nil
}

// call calls export with input. failed is what the guest reported the Extism way (its
// error_set message, or its non-zero return code), err what ended the call otherwise:
// a trap, an exit, the deadline, a dead instance.
func (in *Instance) call(ctx context.Context, export string, input []byte) (out []byte, failed string, err error) {
	in.enter(ctx)
	// The end of ctx closes the whole plugin, the kernel included: the SDK makes some of
	// its kernel calls under a context of its own that never ends, and the guest can
	// make the kernel loop (RATIONALE.md, "Why does a call's end close the kernel?").
	closing := context.AfterFunc(ctx, func() { in.p.Close(context.Background()) })
	defer func() {
		if !closing() && err == nil {
			out, failed, err = nil, "", fmt.Errorf("extism: the instance was closed at the end of its call: %w", context.Cause(ctx))
		}
	}()
	rc, out, err := in.p.CallWithContext(withModule(hostfn.WithCaller(ctx, in.caller), &in.mod), export, input)
	if err != nil {
		// The SDK returns the guest's error_set message as a plain error, the same as a
		// trap's: the kernel still holds the message only when the guest set it.
		if msg := in.p.GetErrorWithContext(context.WithoutCancel(ctx)); msg != "" && msg == err.Error() {
			return nil, fmt.Sprintf("%s returned %d: %s", export, rc, msg), nil
		}
		return nil, "", err
	}
	if rc != 0 {
		return nil, fmt.Sprintf("%s returned %d", export, rc), nil
	}
	return out, "", nil
}

// Close closes the instance. Closing an instance that a deadline already closed is not
// an error.
func (in *Instance) Close(ctx context.Context) error {
	return in.p.Close(ctx)
}
