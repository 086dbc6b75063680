package extism

import (
	"context"
	"fmt"
	"io"

	"github.com/tetratelabs/wazero/api"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/native"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/slotstate"
)

// Instance is one instantiated Extism plugin: its module and its kernel. It is owned by
// one goroutine (a slot, or the loader's probe) and never called concurrently.
//
// An error from Handle or Tick is a *slot.Died: the instance is dead, Close it and make
// a fresh one. An error the guest reports the Extism way (error_set, or a non-zero
// return code) is not a death: it fails the task (failed).
type Instance struct {
	mod    api.Module     // owned by the instance's goroutine
	k      *kernel        // owned by the instance's goroutine
	caller *hostfn.Caller // immutable pointer
	enter  func(context.Context)
	stop   native.Stop // the rewriter's stop global, armed around each call of the guest
	dead   error       // the death that ended the instance, after which it runs nothing

	// The fleet exports, looked up at Instantiate: a lookup per call costs microseconds
	// and garbage. handle and tick are nil when not exported.
	describe, handle, tick api.Function

	stack [1]uint64 // reused by every CallWithStack; owned by the instance's goroutine
}

// Instantiate makes a fresh instance named name (unique in the runtime), in the sandbox
// of native's instances, whose host calls are attributed to caller; its log lines
// (Extism's log_info and above) and its WASI stdout and stderr go to out (nil discards
// them). It runs the module's start function (moved by native.Rewrite to an export) and
// its initialisation under ctx, as Extism's SDK does before a module's first call: a
// WASI reactor's _initialize, or a command's __wasm_call_ctors, and a Haskell module's
// hs_init. ctx should carry a deadline: that code is as untrusted as the exports.
func (rt *Runtime) Instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (*Instance, error) {
	if out == nil {
		out = io.Discard
	}
	cfg, enter := native.Sandbox(out)
	k := newKernel(rt.limit, rt.config, out)
	enter(ctx)
	ctx = withKernel(hostfn.WithCaller(ctx, caller), k)
	mod, err := rt.r.InstantiateModule(ctx, rt.compiled, cfg.WithName(name).WithStartFunctions())
	if err != nil {
		return nil, fmt.Errorf("extism: instantiate %s: %w", name, err)
	}
	in := &Instance{
		mod: mod, k: k, caller: caller, enter: enter, stop: native.NewStop(mod),
		describe: mod.ExportedFunction(abi.ExportDescribe),
		handle:   mod.ExportedFunction(abi.ExportHandle),
		tick:     mod.ExportedFunction(abi.ExportTick),
	}
	if err := in.initialize(ctx); err != nil {
		_ = mod.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("extism: instantiate %s: %w", name, err)
	}
	return in, nil
}

// initialize runs the module's start function, then its language runtime's start, the
// functions Extism's SDK runs (its runtime.go): _initialize, or else __wasm_call_ctors,
// when it takes no parameters; then hs_init(0, 0) when the module is Haskell's.
func (in *Instance) initialize(ctx context.Context) error {
	if f := in.mod.ExportedFunction(native.StartExport); f != nil {
		if err := in.start(ctx, "the start function", f); err != nil {
			return err
		}
	}
	for _, name := range []string{abi.ExportInitialize, "__wasm_call_ctors"} {
		if f := in.mod.ExportedFunction(name); f != nil && len(f.Definition().ParamTypes()) == 0 {
			if err := in.start(ctx, name, f); err != nil {
				return err
			}
			break
		}
	}
	if f := in.mod.ExportedFunction("hs_init"); f != nil && len(f.Definition().ParamTypes()) == 2 {
		return in.start(ctx, "hs_init", f)
	}
	return nil
}

// start calls f, the start function name, with zero arguments. A failed start is named
// as a call's death is (death.go): a stack past its budget by the rewriter's global,
// never by wazero's text.
func (in *Instance) start(ctx context.Context, name string, f api.Function) error {
	var stack [2]uint64
	disarm := in.stop.Arm(ctx)
	err := in.stop.Wrap(ctx, f.CallWithStack(ctx, stack[:]))
	disarm()
	if err != nil && native.StackLimitHit(in.mod) {
		err = native.ErrStackLimit
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Describe calls fleet_describe with no input and returns its output.
func (in *Instance) Describe(ctx context.Context) ([]byte, error) {
	failed, err := in.call(ctx, in.describe, abi.ExportDescribe, nil)
	if err != nil {
		return nil, fmt.Errorf("extism: %s: %w", abi.ExportDescribe, err)
	}
	if failed != "" {
		return nil, fmt.Errorf("extism: %s failed: %s", abi.ExportDescribe, failed)
	}
	return in.k.outputBytes(abi.ExportDescribe, abi.MaxRequest)
}

// Handle calls fleet_handle with input (an abi.HandleInput) and returns its output, a
// HandleResult. A call the guest fails the Extism way is a HandleResult that fails the
// task, with the guest's message as the reason.
func (in *Instance) Handle(ctx context.Context, input []byte) ([]byte, error) {
	return in.run(ctx, in.handle, abi.ExportHandle, input)
}

// Tick is Handle for loop plugins: fleet_tick with an abi.TickInput.
func (in *Instance) Tick(ctx context.Context, input []byte) ([]byte, error) {
	return in.run(ctx, in.tick, abi.ExportTick, input)
}

func (in *Instance) run(ctx context.Context, fn api.Function, export string, input []byte) ([]byte, error) {
	if fn == nil {
		return nil, &slot.Died{Death: slotstate.DeathBadResult, Err: fmt.Errorf("extism: module does not export %s", export)}
	}
	in.caller.Begin()
	failed, err := in.call(ctx, fn, export, input)
	if err != nil {
		death, err := death(ctx, in.mod, in.k, err)
		return nil, &slot.Died{Death: death, Err: fmt.Errorf("extism: %s: %w", export, err)}
	}
	if failed != "" {
		return abi.HandleResult{Outcome: abi.OutcomeFail, Reason: failed}.AppendJSON(nil), nil
	}
	b, err := in.k.outputBytes(export, abi.MaxRequest)
	if err != nil {
		return nil, &slot.Died{Death: slotstate.DeathBadResult, Err: err}
	}
	return b, nil
}

// call calls fn, the export named export, with input; the output the guest set is in
// the kernel (kernel.outputBytes). failed is what the guest reported the Extism way (its
// error_set message, or its non-zero return code), err what ended the call otherwise: a
// trap, an exit, the deadline, a dead instance.
func (in *Instance) call(ctx context.Context, fn api.Function, export string, input []byte) (failed string, err error) {
	if fn == nil {
		return "", fmt.Errorf("module does not export %s", export)
	}
	if in.dead != nil {
		// The stop global is clear once its call returns: a dead instance runs nothing.
		return "", fmt.Errorf("the instance is dead: %w", in.dead)
	}
	in.enter(ctx)
	if !in.k.begin(input) {
		return "", fmt.Errorf("the input of %d bytes does not fit the kernel's memory (%d bytes)", len(input), in.k.limit)
	}
	disarm := in.stop.Arm(ctx)
	err = in.stop.Wrap(ctx, fn.CallWithStack(withKernel(hostfn.WithCaller(ctx, in.caller), in.k), in.stack[:]))
	disarm()
	if err != nil {
		in.dead = err
		return "", err
	}
	rc := api.DecodeU32(in.stack[0])
	if msg, ok := in.k.errorMessage(); ok {
		return fmt.Sprintf("%s returned %d: %s", export, rc, msg), nil
	}
	if rc != 0 {
		return fmt.Sprintf("%s returned %d", export, rc), nil
	}
	return "", nil
}

// Close closes the instance. Closing an instance that a deadline already closed is not
// an error.
func (in *Instance) Close(ctx context.Context) error {
	return in.mod.Close(ctx)
}
