package native

import (
	"context"
	"io"

	"github.com/tetratelabs/wazero"
)

// This file is what the Extism transport (internal/extism) takes from this package, so
// that a plugin runs in one sandbox whichever transport it speaks: the module rewriter,
// the WASI sandbox of an instance and the death of a failed call (Classify). It also
// takes Compile (runtime.go), MemoryFull and StackLimitHit (instance.go), which stand
// beside their native callers.

// Rewrite is the module rewriter that NewRuntime runs (rewrite.go), for a runtime with
// WithCloseOnContextDone: every function entry and loop header counts towards a
// deadline check, the guest's call stack has a budget and its table a small maximum. It
// keeps a start function (AssemblyScript's top-level code), which the runtime's close
// bounds. It refuses, naming it, what it does not understand.
func Rewrite(wasm []byte) ([]byte, error) { return rewriteKeepingStart(wasm) }

// Sandbox returns the WASI module config of one instance (no filesystem, environment,
// arguments or sockets; real clocks; crypto/rand; guest output to out, nil discarding it;
// see Runtime.Instantiate) and its enter: called with the context of each export call
// before it runs, it makes the instance's sleeps, writes and random reads end with that
// context.
func Sandbox(out io.Writer) (wazero.ModuleConfig, func(context.Context)) {
	call := newCallState(out)
	return call.moduleConfig(), call.enter
}
