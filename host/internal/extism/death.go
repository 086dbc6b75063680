package extism

import (
	"context"
	"fmt"
	"slices"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/native"
	"github.com/fleethost/fleet/host/slotstate"
)

// A death is told from the instance's state, never from the error's text, which the guest
// controls (RATIONALE.md, "How are memory and stack deaths told?"). The SDK keeps the
// module to itself, so a function listener on the fleet exports hands each call's module
// to its Instance (withModule): the listener is compiled into those exports alone, which
// the host calls once a task, and into nothing the guest calls.

// moduleKey is the context key of the *api.Module a call's listener fills in.
type moduleKey struct{}

// withModule is ctx carrying ref, which the listener sets to the module whose fleet export
// the call runs.
func withModule(ctx context.Context, ref *api.Module) context.Context {
	return context.WithValue(ctx, moduleKey{}, ref)
}

// listening is ctx with the factory of the module listener: compile the module under it.
func listening(ctx context.Context) context.Context {
	return experimental.WithFunctionListenerFactory(ctx, experimental.FunctionListenerFactoryFunc(exportListener))
}

var fleetExports = []string{abi.ExportDescribe, abi.ExportHandle, abi.ExportTick}

// exportListener listens to the fleet exports only (the Extism kernel exports none of
// their names; the host modules' functions are not exports of the guest's).
func exportListener(def api.FunctionDefinition) experimental.FunctionListener {
	if def.GoFunction() != nil || !slices.ContainsFunc(def.ExportNames(), func(n string) bool { return slices.Contains(fleetExports, n) }) {
		return nil
	}
	return experimental.FunctionListenerFunc(func(ctx context.Context, mod api.Module, _ api.FunctionDefinition, _ []uint64, _ experimental.StackIterator) {
		if ref, ok := ctx.Value(moduleKey{}).(*api.Module); ok {
			*ref = mod
		}
	})
}

// death is the death of a call under ctx that failed with err, told as a native
// instance's is (native.Classify, then the state of its memory and stack): dead of its
// memory when the module's memory, or the kernel's, is near its limit (native.MemoryFull:
// the kernel begins at 1 MiB, which a limit of 16 pages leaves no room to grow, so its
// memory is never full there, though it may run out of blocks), and
// of its stack when the rewriter's stack check trapped. mod is the call's module, nil if
// the call failed before its export ran; kernel is the kernel's memory, which began at
// kernelBase bytes.
func death(ctx context.Context, mod api.Module, kernel api.Memory, kernelBase uint64, err error) (slotstate.Death, error) {
	death, err := native.Classify(ctx, err)
	if death == slotstate.DeathHostPanic {
		return death, err
	}
	if native.MemoryFull(kernel, kernelBase) || (mod != nil && native.MemoryFull(mod.Memory(), 0)) {
		return slotstate.DeathMemory, err
	}
	if death == slotstate.DeathTrap && mod != nil && native.StackLimitHit(mod) {
		return slotstate.DeathStack, fmt.Errorf("%w: %w", native.ErrStackLimit, err)
	}
	return death, err
}
