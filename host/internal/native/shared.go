package native

import (
	"context"
	"io"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// This file is what the Extism transport (internal/extism) takes from this package, so
// that a plugin runs in one sandbox whichever transport it speaks: the module rewriter
// and its stop, the WASI sandbox of an instance and the death of a failed call
// (Classify). It also
// takes Compile (runtime.go), MemoryFull and StackLimitHit (instance.go), which stand
// beside their native callers.

// Rewrite is the module rewriter that NewRuntime runs (rewrite.go): every function
// entry and loop header counts towards a deadline check, the guest's call stack has a
// budget and its table a small maximum. A start function (AssemblyScript's top-level
// code), which NewRuntime refuses, becomes the export StartExport, for the caller to
// call after instantiation under its Stop. It refuses, naming it, what it does not
// understand.
func Rewrite(wasm []byte) ([]byte, error) { return rewriteMovingStart(wasm) }

// Stop is the rewriter's stop global of one instance (stopFlag), which ends an export
// call at its context's end as native's instances do, without WithCloseOnContextDone.
// The zero Stop, of a module without the global, stops nothing.
type Stop struct{ f *stopFlag }

// NewStop is the Stop of mod, a module that Rewrite rewrote.
func NewStop(mod api.Module) Stop {
	if g, ok := mod.ExportedGlobal(stopGlobal).(api.MutableGlobal); ok {
		return Stop{newStopFlag(g)}
	}
	return Stop{}
}

// Arm stops the instance's call under ctx when ctx ends, until the returned disarm runs:
// arm before each export call, disarm when it returns.
func (s Stop) Arm(ctx context.Context) (disarm func()) { return s.f.arm(ctx) }

// Wrap is err, the error of a call under ctx, wrapped as the stop's when the stop ended
// the call (errors.Is(err, context.DeadlineExceeded) then tells a deadline).
func (s Stop) Wrap(ctx context.Context, err error) error { return s.f.wrap(ctx, err) }

// Sandbox returns the WASI module config of one instance (no filesystem, environment,
// arguments or sockets; real clocks; crypto/rand; guest output to out, nil discarding it;
// see Runtime.Instantiate) and its enter: called with the context of each export call
// before it runs, it makes the instance's sleeps, writes and random reads end with that
// context.
func Sandbox(out io.Writer) (wazero.ModuleConfig, func(context.Context)) {
	call := newCallState(out)
	return call.moduleConfig(), call.enter
}
